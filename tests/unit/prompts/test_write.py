"""``write_prompts``, called directly (no Dagster): the files it writes, its counts and its data version."""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
import pytest

from eagle_assets.core.layout import current_folder
from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.checks import check_results
from eagle_assets.prompts.records import PROMPTS_SCHEMA
from eagle_assets.prompts.splits import SplitRule
from eagle_assets.prompts.write import EXAMPLES_SHOWN, VERSIONED_COLUMNS, write_prompts
from eagle_assets.sources import SourceUnavailable

LOG = logging.getLogger("tests.prompts.write")


def chat(question: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": question}]}).encode()


def test_the_demo_source_is_written_with_its_counts_and_a_stable_version(tmp_path):
    folder = tmp_path / "prompts" / "demo"
    written = write_prompts(dataset_source("demo"), folder, LOG)
    found, table = written.found, written.table
    # A version folder of its own, named by the data version, that current.json names.
    assert written.path == folder / "versions" / written.data_version / "prompts.parquet"
    assert written.path.parent == current_folder(folder)
    stored = pq.read_table(written.path)
    assert stored.schema == PROMPTS_SCHEMA and stored.equals(table)
    assert found.rows_read == 720 and found.error is None and not found.skips
    assert table.num_rows == found.unique == found.rows_read - found.duplicates > 0
    assert json.loads((written.path.parent / "skipped.json").read_text()) == []
    assert set(table["split"].to_pylist()) == {"train", "validation", "heldout"}
    assert written.source_version and len(written.data_version) == 16
    stamp = written.path.stat().st_mtime_ns
    again = write_prompts(dataset_source("demo"), folder, LOG)
    assert again.data_version == written.data_version and again.path == written.path
    assert written.path.stat().st_mtime_ns == stamp  # the same content: the published version is kept as it is
    assert [r.passed for r in check_results(found, table.num_rows)] == [True, True]


def test_bad_rows_are_skipped_by_reason_listed_and_logged(tmp_path, caplog):
    source = tmp_path / "mixed.jsonl"
    source.write_bytes(b"\n".join([chat("Hi"), chat("Hi"), chat(""), b"{not json", chat("Bye")]))
    folder = tmp_path / "prompts" / "jsonl"
    with caplog.at_level(logging.INFO, logger=LOG.name):
        written = write_prompts(dataset_source("jsonl"), folder, LOG, location=str(source))
    found = written.found
    assert (found.rows_read, written.table.num_rows, found.duplicates, len(found.skips)) == (5, 2, 1, 2)
    assert dict(found.skipped_by_reason) == {"empty_content": 1, "unreadable": 1}
    listed = json.loads((written.path.parent / "skipped.json").read_text())
    assert [(s["row"], s["reason"]) for s in listed] == [
        ("mixed.jsonl:3", "empty_content"),
        ("mixed.jsonl:4", "unreadable"),
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [s.message for s in found.skips]
    assert any("kept 2 of 5 rows" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_the_version_covers_every_column_and_the_skipped_rows(tmp_path):
    """A version folder is never rewritten, so whatever it holds that can differ is in its name: the same
    kept rows with other skipped rows are another version, and the earlier one stays as it was."""
    assert {*VERSIONED_COLUMNS, "messages"} == set(PROMPTS_SCHEMA.names)  # messages: through prompt_id
    source, folder = tmp_path / "rows.jsonl", tmp_path / "prompts" / "jsonl"
    source.write_bytes(b"\n".join([chat("Hi"), chat("")]))
    empty = write_prompts(dataset_source("jsonl"), folder, LOG, location=str(source))
    first = {p.name: p.read_bytes() for p in empty.path.parent.iterdir()}
    source.write_bytes(b"\n".join([chat("Hi"), b"{not json"]))
    unreadable = write_prompts(dataset_source("jsonl"), folder, LOG, location=str(source))
    assert unreadable.table.equals(empty.table) and unreadable.data_version != empty.data_version
    assert unreadable.path.parent == current_folder(folder) != empty.path.parent
    assert {p.name: p.read_bytes() for p in empty.path.parent.iterdir()} == first


def test_only_the_first_skips_are_logged_one_by_one(tmp_path, caplog):
    source = tmp_path / "empty.jsonl"
    source.write_bytes(b"\n".join([chat("") for _ in range(EXAMPLES_SHOWN + 3)] + [chat("kept")]))
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        written = write_prompts(dataset_source("jsonl"), tmp_path / "out", LOG, location=str(source))
    assert len(written.found.skips) == EXAMPLES_SHOWN + 3 and written.table.num_rows == 1
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == EXAMPLES_SHOWN + 1 and warnings[-1].startswith("3 more skipped rows listed in")


def test_limit_keeps_a_seeded_sample_and_changes_the_version(tmp_path):
    source = dataset_source("demo")

    def ids(seed):
        return write_prompts(source, tmp_path / str(seed), LOG, limit=25, seed=seed).table["prompt_id"].to_pylist()

    assert len(ids(1)) == 25 and ids(1) == ids(1) != ids(2)
    whole = write_prompts(source, tmp_path / "all", LOG)
    sample = write_prompts(source, tmp_path / "one", LOG, limit=25, seed=1)
    assert sample.data_version != whole.data_version
    assert set(sample.table["prompt_id"].to_pylist()) <= set(whole.table["prompt_id"].to_pylist())


def test_the_split_rule_decides_the_splits(tmp_path):
    source = dataset_source("demo")
    heldout = write_prompts(source, tmp_path / "eval", LOG, rule=SplitRule(evaluation_only=True)).table
    assert set(heldout["split"].to_pylist()) == {"heldout"}
    wide = write_prompts(source, tmp_path / "wide", LOG, rule=SplitRule(0.2, 0.5)).table["split"].to_pylist()
    assert 0.4 < wide.count("heldout") / len(wide) < 0.6 and 0.13 < wide.count("validation") / len(wide) < 0.27


def test_an_unavailable_source_raises_and_writes_nothing(tmp_path):
    folder = tmp_path / "prompts" / "jsonl"
    with pytest.raises(SourceUnavailable, match=r"absent\.jsonl"):
        write_prompts(dataset_source("jsonl"), folder, LOG, location=str(tmp_path / "absent.jsonl"))
    assert not folder.exists()
