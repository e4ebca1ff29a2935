"""Append-only Parquet shards: a folder of tables in which a later row replaces an earlier one of the
same key (a crash loses at most the rows not yet written, and a retry simply appends)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from eagle_assets.core.layout import SHARD_GLOB


def shard_paths(folder: str | Path) -> list[Path]:
    """Every complete shard of ``folder``, oldest first."""
    return sorted(Path(folder).glob(SHARD_GLOB))


def latest_rows(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The last row of each ``keys`` value in ``rows`` (shards concatenated oldest first), sorted by ``keys``."""
    order = pa.array(range(rows.num_rows), pa.int64())
    latest = (
        pa.table({**{k: rows[k] for k in keys}, "_order": order})
        .group_by(list(keys), use_threads=False)
        .aggregate([("_order", "max")])
    )
    picked = rows.take(latest["_order_max"])
    return picked.take(pc.sort_indices(picked, [(k, "ascending") for k in keys]))
