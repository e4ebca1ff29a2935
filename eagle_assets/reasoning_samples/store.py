"""Append-only Parquet shards of reasoning samples: crash-safe, resumable, exactly-once.

A sample set folder (one generation recipe's, :mod:`.recipe`) holds ``shard-<time_ns>-<pid>-<n>.parquet``
files, each written atomically (temporary file, fsync, rename), so a kill leaves whole shards only. Rows
are never rewritten: a prompt retried after an error simply gets a newer row, and :func:`load_samples`
keeps the latest row per ``prompt_id`` and ``turn`` (shard names sort by creation time). The done-set of a
resumed run is the prompts (or, with ``turns: all``, the turns) whose latest row is ``ok``; errors are
retried. Every row names its recipe (``recipe``); a set holds one recipe's rows, so one turn mode's.

Beside the shards, ``quality-<time_ns>-<content hash>.parquet`` holds each latest row's quality class (keyed
by ``prompt_id`` and ``finished_at``, so a newer row of the same prompt is never given an older row's class)
and, in its schema metadata, the rules it was classified by; the newest file counts. A file is added when
the classes change (new rows, other rules), never rewritten: a kept checkpoint's lineage records the sha256
of the classes it was trained with, and they must stay as they were. :func:`load_classified` joins the
classes in; rows they do not cover (captured since) are classified on read with the same rules.

Writing happens on one background thread so that the asyncio loop sending requests never waits for
compression or disk.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash, remove_stale_temporaries, write_parquet
from eagle_assets.core.layout import LAST_TURN_ONLY, QUALITY_GLOB
from eagle_assets.core.shards import latest_rows, shard_paths
from eagle_assets.core.tables import table_version
from eagle_assets.reasoning_samples.quality import QUALITY_SCHEMA, QualityRules, classify_samples
from eagle_assets.reasoning_samples.recipe import read_recipe
from eagle_assets.reasoning_samples.turns import Answer

_RULES_KEY = b"quality_rules"

# What downstream stages read: ids, status, texts, the exact token ids and the quality classes.
VERSIONED_COLUMNS = (
    "prompt_id",
    "turn",
    "status",
    "finish_reason",
    "reasoning",
    "content",
    "quality",
    "loop_start",
    "prompt_token_ids",
    "token_ids",
)
SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("turn", pa.int32()),  # which assistant turn this answers; LAST_TURN_ONLY for `turns: last` rows
        ("recipe", pa.string()),  # the generation recipe's id (.recipe): the sample set the row belongs to
        ("draft", pa.string()),  # JSON of the draft that served the row (.draft), null: none
        ("split", pa.string()),
        ("status", pa.string()),  # "ok" | "error"
        ("error", pa.string()),
        ("reasoning", pa.string()),
        ("content", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("thinking_tokens", pa.int32()),  # null: no thinking section
        ("truncated", pa.bool_()),
        ("unfinished_thinking", pa.bool_()),
        ("sampling", pa.string()),  # JSON of the request's sampling parameters
        ("server_model", pa.string()),
        ("vllm_version", pa.string()),
        ("base_url", pa.string()),
        ("latency_s", pa.float64()),
        ("finished_at", pa.float64()),  # unix seconds
    ]
)


def turn_mode(folder: Path) -> str:
    """The turn mode of the sample set ``folder`` (its recipe's ``turns``; ``last`` before it has one)."""
    recipe = read_recipe(folder)
    return recipe.settings["turns"] if recipe else "last"


def load_samples(folder: Path, columns: list[str] | None = None) -> pa.Table:
    """The latest row per ``(prompt_id, turn)`` over all shards of ``folder``, sorted by ``prompt_id`` then
    ``turn``.

    ``columns`` limits what is read (``prompt_id`` and ``turn`` are always included).
    """
    keys = ("prompt_id", "turn")
    columns = None if columns is None else [*keys, *(c for c in columns if c not in keys)]
    schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
    tables = [_read_shard(path, schema) for path in shard_paths(folder)]
    if not tables:
        return schema.empty_table()
    return latest_rows(pa.concat_tables(tables, promote_options="default"), keys)


def _read_shard(path: Path, schema: pa.Schema) -> pa.Table:
    """One shard as ``schema``; columns added to the schema since it was written come back null."""
    table = pq.read_table(path, columns=[name for name in schema.names if name in pq.read_schema(path).names])
    for field in schema:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names)


def _quality_paths(folder: Path) -> list[Path]:
    """The quality files of ``folder``, oldest first (their names start with the time they were written)."""
    return sorted(Path(folder).glob(QUALITY_GLOB))


def write_quality(folder: Path, samples: pa.Table, rules: QualityRules) -> pa.Table:
    """Classify ``samples`` (the latest rows of ``folder``) by ``rules``; store the classes as a new quality
    file unless the newest one holds exactly these."""
    classes = classify_samples(samples, rules)
    rules_json = json.dumps(rules.as_dict(), sort_keys=True)
    digest = combined_hash([rules_json, table_version(classes, QUALITY_SCHEMA.names)])[:16]
    newest = _quality_paths(folder)[-1:]
    if not newest or not newest[0].stem.endswith(f"-{digest}"):
        meta = {_RULES_KEY: rules_json.encode()}
        name = QUALITY_GLOB.replace("*", f"{time.time_ns():020d}-{digest}")
        write_parquet(classes.replace_schema_metadata(meta), Path(folder) / name)
    return classes


def _stored_quality(folder: Path) -> tuple[pa.Table | None, QualityRules]:
    paths = _quality_paths(folder)
    if not paths:
        return None, QualityRules()
    table = pq.read_table(paths[-1])
    rules = QualityRules(**json.loads((table.schema.metadata or {}).get(_RULES_KEY, b"{}")))
    return table.replace_schema_metadata(None), rules


def load_classified(folder: Path) -> tuple[pa.Table, QualityRules]:
    """:func:`load_samples` with ``quality`` and ``loop_start`` columns, and the rules they come from."""
    samples = load_samples(folder)
    stored, rules = _stored_quality(folder)
    if stored is None:
        return with_classes(samples, classify_samples(samples, rules)), rules
    # (prompt_id, finished_at) names one row: the turns of a conversation finish one after another.
    keys = ["prompt_id", "finished_at"]
    rows = samples.select(keys).append_column("_row", pa.array(range(samples.num_rows), pa.int64()))
    joined = rows.join(stored, keys, join_type="left outer", use_threads=False)
    joined = joined.take(pc.sort_indices(joined, [("_row", "ascending")]))  # samples' order
    missing = pc.is_null(joined["quality"])
    quality, loop_start = joined["quality"].to_pylist(), joined["loop_start"].to_pylist()
    fresh = classify_samples(samples.filter(missing), rules)
    positions = pc.indices_nonzero(missing).to_pylist()
    for position, cls, start in zip(positions, fresh["quality"].to_pylist(), fresh["loop_start"].to_pylist()):
        quality[position], loop_start[position] = cls, start
    classes = pa.table({"quality": pa.array(quality, pa.string()), "loop_start": pa.array(loop_start, pa.int32())})
    return with_classes(samples, classes), rules


def with_classes(samples: pa.Table, classes: pa.Table) -> pa.Table:
    """``samples`` with the ``quality`` and ``loop_start`` columns of ``classes`` (rows in the same order)."""
    return samples.append_column("quality", classes["quality"]).append_column("loop_start", classes["loop_start"])


def done_prompt_ids(folder: Path) -> set[str]:
    """Prompts whose latest row is ``ok`` (``turns: last``): a resumed run skips them; errors are retried."""
    latest = load_samples(folder, columns=["status"])
    ok = latest.filter(pc.equal(latest["status"], "ok"))
    return set(ok["prompt_id"].to_pylist())


def done_turns(folder: Path) -> dict[tuple[str, int], Answer]:
    """``(prompt_id, turn)`` -> the stored answer, for turns whose latest row is ``ok`` (``turns: all``)."""
    latest = load_samples(folder, columns=["status", "content", "reasoning"])
    ok = latest.filter(pc.equal(latest["status"], "ok"))
    return {
        (pid, turn): Answer(content, reasoning)
        for pid, turn, content, reasoning in zip(
            ok["prompt_id"].to_pylist(), ok["turn"].to_pylist(), ok["content"].to_pylist(), ok["reasoning"].to_pylist()
        )
    }


class ShardWriter:
    """Buffers rows and hands full buffers to a background thread that writes one shard each.

    ``add`` is cheap (a list append). A buffer is flushed when it reaches ``rows_per_shard`` or is
    older than ``max_age_s``, whichever comes first — checked on every ``add`` and by
    :meth:`flush_if_stale` (the capture's ticker, for quiet stretches) — so a kill loses at most
    ``max_age_s`` seconds of answered rows. Errors of the writer thread surface on the next call.
    ``recipe`` is the id every row records: the set's (None: rows outside a sample set, e.g. a benchmark's,
    keep what they name); ``draft`` the JSON of the draft the server speculated with (None: no draft).
    """

    def __init__(
        self,
        folder: Path,
        rows_per_shard: int = 256,
        max_age_s: float = 60.0,
        recipe: str | None = None,
        draft: str | None = None,
    ):
        if rows_per_shard < 1:
            raise ValueError(f"rows_per_shard must be >= 1, got {rows_per_shard}")
        self.folder = Path(folder)
        self.recipe = recipe
        self.draft = draft
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.folder)
        self.rows_per_shard = rows_per_shard
        self.max_age_s = max_age_s
        self.rows_written = 0
        self.shards_written = 0
        self._buffer: list[dict] = []
        self._buffer_since = time.monotonic()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer")
        self._pending: list[Future] = []
        self._counter = 0

    def add(self, row: dict) -> None:
        self._raise_writer_errors()
        with self._lock:
            if not self._buffer:
                self._buffer_since = time.monotonic()
            self._buffer.append(row)
            full = len(self._buffer) >= self.rows_per_shard
            stale = time.monotonic() - self._buffer_since >= self.max_age_s
        if full or stale:
            self.flush()

    def flush_if_stale(self) -> None:
        self._raise_writer_errors()
        if self._buffer and time.monotonic() - self._buffer_since >= self.max_age_s:
            self.flush()

    def flush(self) -> None:
        """Queue the buffered rows as one shard (non-blocking)."""
        with self._lock:
            rows, self._buffer = self._buffer, []
        if rows:
            self._counter += 1
            name = f"shard-{time.time_ns():020d}-{os.getpid()}-{self._counter:06d}.parquet"
            self._pending.append(self._pool.submit(self._write, rows, self.folder / name))

    def _write(self, rows: list[dict], path: Path) -> None:
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        # A row that names no turn answers its conversation's last turn (a `turns: last` row).
        turn = SCHEMA.get_field_index("turn")
        table = table.set_column(turn, SCHEMA.field(turn), pc.fill_null(table["turn"], LAST_TURN_ONLY))
        for name, value in (("recipe", self.recipe), ("draft", self.draft)):
            if value is not None:
                index = SCHEMA.get_field_index(name)
                table = table.set_column(index, SCHEMA.field(index), pa.array([value] * len(rows), pa.string()))
        write_parquet(table, path)
        self.rows_written += len(rows)
        self.shards_written += 1

    def _raise_writer_errors(self) -> None:
        still = []
        for future in self._pending:
            if future.done():
                future.result()  # re-raises a failed write here, in the caller's thread
            else:
                still.append(future)
        self._pending = still

    def close(self) -> None:
        """Write what is buffered and wait for every shard to be on disk."""
        self.flush()
        self._pool.shutdown(wait=True)
        self._raise_writer_errors()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
