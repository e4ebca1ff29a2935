"""Lineage of a draft checkpoint: from prompt sources to weights, auditable without the Dagster instance.

The checkpoint asset records where its training data came from, so a draft can be traced and checked
long after the runs that made it:

- :mod:`.collect` reads the Dagster provenance of the upstream versions the training read (data and code
  versions, input data versions, run ids, metadata; :mod:`.materializations` finds the materialization
  that published each) and the facts stored with the upstream files.
- :mod:`.artifacts` lists and hashes those files: each upstream partition's version folder
  (reasoning_samples: a recipe's sample set), never rewritten by a later materialization, with the version
  ids, and the speculators training folder.
- :mod:`.record` writes ``lineage.json`` into the checkpoint, with the checkpoint's own files and content
  hash, and its sha256 beside it (``lineage.sha256``); the checkpoint asset also records that sha256 in
  its materialization metadata, and ``lineage.sig`` (an HMAC-SHA256 of the record) when a lineage key
  is configured. It reads the record back and defines its required keys.
- :mod:`.render` shows a record: the materialization's Markdown table and ``eagle-assets lineage show``.
- :mod:`.verify` checks the record against both sha256s (and, given the key, its signature), recomputes
  every hash on a thread pool (upstream files, the training folder, the checkpoint's files and folder
  name), or in the quick tier every size and a seeded sample's hashes, and names each artifact that
  changed or vanished (``eagle-assets lineage verify``).

Upstream paths are stored relative to the storage root (recorded too), so a moved data folder still
verifies with ``root=...``; checkpoint files are relative to the checkpoint folder itself.
"""
