"""Lineage of a draft checkpoint: from prompt sources to weights, auditable without the Dagster instance.

The checkpoint asset records where its training data came from, so a draft can be traced and checked
long after the runs that made it:

- :mod:`.collect` reads the Dagster provenance of the latest upstream materializations (data and code
  versions, input data versions, run ids, metadata) and hashes every stored upstream file.
- :mod:`.record` writes ``lineage.json`` into the checkpoint, with the checkpoint's own files and content
  hash, and its sha256 beside it (``lineage.sha256``); the checkpoint asset also records that sha256 in
  its materialization metadata. It reads the record back and defines its required keys.
- :mod:`.render` shows a record: the materialization's Markdown table and ``eagle-assets lineage show``.
- :mod:`.verify` checks the record against both sha256s, recomputes every hash (upstream files, the
  training folder, the checkpoint's files and folder name) and names each artifact that changed or
  vanished (``eagle-assets lineage verify``).

Upstream paths are stored relative to the storage root (recorded too), so a moved data folder still
verifies with ``root=...``; checkpoint files are relative to the checkpoint folder itself.
"""
