"""Arrow helpers, and the one data-version function of a stage's table."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from eagle_assets.core.files import combined_hash


def list_column_parts(column: pa.ChunkedArray | pa.Array) -> tuple[bytes, bytes]:
    """A list column as (row lengths, flattened values) bytes for :func:`combined_hash`; null rows get -1."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return (
        pc.fill_null(pc.list_value_length(column), -1).to_numpy().tobytes(),
        pc.list_flatten(column).to_numpy().tobytes(),
    )


def list_rows(column) -> list:
    """Per-row numpy views of a list<int> column, None for nulls. Python lists of ints would not fit
    in memory at scale (100K samples x 8K tokens = 800M ints)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets, values = arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return [values[offsets[i] : offsets[i + 1]] if valid[i] else None for i in range(len(arr))]


def table_version(table: pa.Table, columns: Iterable[str]) -> str:
    """The data version of ``table``: a 16-hex content hash over ``columns`` (those it has), row order
    included. List columns hash as their row lengths and flattened values (no Python objects: a
    sample table holds hundreds of millions of token ids), other columns as each value's repr."""
    parts: list[bytes | str] = []
    for name in (c for c in columns if c in table.column_names):
        column = table[name]
        parts.append(name)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            parts += list_column_parts(column)
        else:
            parts.append("\x1f".join(repr(v) for v in column.to_pylist()))
    return combined_hash(parts)[:16]
