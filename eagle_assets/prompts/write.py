"""Write one partition of the ``prompts`` table: a dataset source collected into ``prompts.parquet``, and the
rows it skipped (with their reasons) into ``skipped.json``, published together as one version folder of the
partition (:func:`~eagle_assets.core.files.publish_version`); no Dagster here, the asset wires it."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from eagle_assets.core.files import combined_hash, publish_version, write_json, write_parquet
from eagle_assets.core.layout import PROMPTS_FILE, SKIPPED_FILE
from eagle_assets.core.tables import table_version
from eagle_assets.prompts.collection import Collection, collect
from eagle_assets.prompts.records import PROMPTS_SCHEMA
from eagle_assets.prompts.splits import SplitRule
from eagle_assets.sources import DatasetSource

# The version names a folder that is never rewritten, so it covers everything in it that can differ: every
# column (the messages through prompt_id, their hash) and, beside the table, the skipped rows.
VERSIONED_COLUMNS = ("prompt_id", "source", "source_id", "reference", "split", "group_id", "metadata")
# Skipped rows named one by one (in the log and the asset's `skipped_examples`); skipped.json lists all.
EXAMPLES_SHOWN = 20


@dataclass(frozen=True)
class WrittenPrompts:
    """What :func:`write_prompts` read and wrote."""

    found: Collection
    table: pa.Table  # the rows of prompts.parquet
    path: Path  # prompts.parquet, in the version folder
    source_version: str  # the source's own version of what it read (a file hash, a dataset revision)
    data_version: str  # the version folder's name: content hash of the whole table and the skipped rows


def write_prompts(
    source: DatasetSource,
    folder: Path,
    log: logging.Logger,
    *,
    location: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    rule: SplitRule = SplitRule(),
) -> WrittenPrompts:
    """Collect ``source`` (at ``location``, else its default) into a new version of the partition ``folder``:
    prompts.parquet (at most ``limit`` unique prompts, a ``seed``-ed sample, split by ``rule``) and
    skipped.json in ``versions/<data version>/``, which ``current.json`` then names.

    :class:`~eagle_assets.sources.SourceUnavailable` before the first row propagates and nothing is
    written; a source failing part-way keeps the rows read before it (``found.error`` says where).
    """
    name = source.name
    started = time.monotonic()

    def progress(found: Collection, elapsed: float) -> None:
        log.info(
            f"{name}: {found.rows_read} rows read ({found.rows_read / elapsed:.0f}/s), "
            f"{found.unique} unique, {found.duplicates} duplicates, {len(found.skips)} skipped"
        )

    version = source.resolved_version(location)
    found = collect(source, location, limit=limit, seed=seed, rule=rule, progress=progress)

    table = pa.Table.from_pylist([p.as_row() for p in found.prompts], schema=PROMPTS_SCHEMA)
    skipped = [{"row": s.row, "reason": s.reason, "detail": s.detail} for s in found.skips]
    data_version = combined_hash(
        [table_version(table, VERSIONED_COLUMNS), json.dumps(skipped, sort_keys=True, default=str)]
    )[:16]

    def write(tmp: Path) -> None:
        write_parquet(table, tmp / PROMPTS_FILE)
        write_json(skipped, tmp / SKIPPED_FILE)

    published = publish_version(Path(folder), data_version, write)
    path = published / PROMPTS_FILE

    for skip in found.skips[:EXAMPLES_SHOWN]:
        log.warning(skip.message)
    if len(found.skips) > EXAMPLES_SHOWN:
        log.warning(f"{len(found.skips) - EXAMPLES_SHOWN} more skipped rows listed in {published / SKIPPED_FILE}")
    if found.error:
        log.error(found.error)
    elapsed = time.monotonic() - started
    log.info(
        f"{name}: kept {table.num_rows} of {found.rows_read} rows in {elapsed:.1f}s "
        f"({found.duplicates} duplicates, {len(found.skips)} skipped) -> {path}"
    )
    return WrittenPrompts(found, table, path, version, data_version)
