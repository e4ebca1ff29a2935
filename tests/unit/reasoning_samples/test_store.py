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


def test_every_row_names_the_recipe_of_the_set_it_is_written_to(tmp_path):
    with ShardWriter(tmp_path, recipe="0123456789abcdef") as writer:
        writer.add(sample_row("a"))
        writer.add(sample_row("b", recipe="fedcba9876543210"))  # a row of another set is written as this set's
    assert load_samples(tmp_path)["recipe"].to_pylist() == ["0123456789abcdef"] * 2


def test_quality_files_are_added_when_the_classes_change_never_rewritten_and_the_newest_counts(tmp_path):
    from eagle_assets.reasoning_samples.quality import QualityRules
    from eagle_assets.reasoning_samples.store import load_classified, write_quality

    with ShardWriter(tmp_path) as writer:
        writer.add(sample_row("a", tokens=tuple(range(40)), content="answer", thinking_tokens=3))
    write_quality(tmp_path, load_samples(tmp_path), QualityRules(min_thinking_tokens=16))
    [first] = tmp_path.glob("quality-*.parquet")
    kept = first.read_bytes()
    write_quality(tmp_path, load_samples(tmp_path), QualityRules(min_thinking_tokens=16))  # the same classes
    assert list(tmp_path.glob("quality-*.parquet")) == [first]
    assert load_classified(tmp_path)[0]["quality"].to_pylist() == ["trivial_reasoning"]

    write_quality(tmp_path, load_samples(tmp_path), QualityRules(min_thinking_tokens=2))  # other rules
    assert len(list(tmp_path.glob("quality-*.parquet"))) == 2 and first.read_bytes() == kept
    samples, rules = load_classified(tmp_path)
    assert samples["quality"].to_pylist() == ["ok"] and rules == QualityRules(min_thinking_tokens=2)
