"""The ``prompts`` asset: dataset sources' rows normalized into prompts with stable ids, deduplicated,
and split into train / validation / held-out by the hash of a problem key."""
