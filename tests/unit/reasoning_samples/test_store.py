"""The shard store: whole shards, the latest row per prompt, retries of error rows, stale flushes."""

from __future__ import annotations

import pyarrow.parquet as pq

from eagle_assets.core.shards import shard_paths
from eagle_assets.core.tables import table_version
from eagle_assets.reasoning_samples.store import VERSIONED_COLUMNS, ShardWriter, done_prompt_ids, load_samples


def sample_row(pid: str, status: str = "ok", tokens=(7, 8), **extra) -> dict:
    return {
        "prompt_id": pid,
        "split": "train",
        "status": status,
        "error": None if status == "ok" else "boom",
        "token_ids": list(tokens),
        "prompt_token_ids": [1],
        "completion_tokens": len(tokens),
        **extra,
    }


def test_writer_makes_whole_shards_and_load_keeps_the_latest_row_per_prompt(tmp_path):
    with ShardWriter(tmp_path, rows_per_shard=2) as writer:
        writer.add(sample_row("a", status="error"))
        writer.add(sample_row("b"))
        writer.add(sample_row("a", tokens=(9,)))  # the retry of a's error, in a later shard
    assert len(shard_paths(tmp_path)) == 2
    assert sum(pq.read_metadata(p).num_rows for p in shard_paths(tmp_path)) == 3

    samples = load_samples(tmp_path)
    assert samples["prompt_id"].to_pylist() == ["a", "b"]
    assert samples["status"].to_pylist() == ["ok", "ok"]
    assert samples["token_ids"].to_pylist() == [[9], [7, 8]]
    assert done_prompt_ids(tmp_path) == {"a", "b"}


def test_error_rows_are_not_done_so_the_next_run_retries_them(tmp_path):
    with ShardWriter(tmp_path) as writer:
        writer.add(sample_row("a"))
        writer.add(sample_row("b", status="error"))
    assert done_prompt_ids(tmp_path) == {"a"}


def test_stale_flush_writes_a_shard_without_waiting_for_a_full_one(tmp_path):
    writer = ShardWriter(tmp_path, rows_per_shard=1000, max_age_s=0.0)
    writer.add(sample_row("a"))
    writer.flush_if_stale()
    writer.close()
    assert len(shard_paths(tmp_path)) == 1


def test_empty_folder_loads_an_empty_table_and_crash_leftovers_are_removed(tmp_path):
    (tmp_path / ".shard-x.parquet.abc.tmp").write_bytes(b"half a shard")
    assert load_samples(tmp_path).num_rows == 0
    ShardWriter(tmp_path).close()
    assert list(tmp_path.iterdir()) == []


def test_content_hash_follows_the_tokens(tmp_path):
    with ShardWriter(tmp_path / "one") as writer:
        writer.add(sample_row("a"))
    with ShardWriter(tmp_path / "two") as writer:
        writer.add(sample_row("a", tokens=(7, 9)))
    one, two = load_samples(tmp_path / "one"), load_samples(tmp_path / "two")
    assert table_version(one, VERSIONED_COLUMNS) == table_version(load_samples(tmp_path / "one"), VERSIONED_COLUMNS)
    assert table_version(one, VERSIONED_COLUMNS) != table_version(two, VERSIONED_COLUMNS)
