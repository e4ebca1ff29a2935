"""The built-in dataset sources read real files: demo, jsonl, parquet, open_perfectblend (local copy)."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.records import Prompt, classify
from eagle_assets.sources import RawRecord, SkippedRow, SourceUnavailable

CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
SHAREGPT = {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}], "source": "metamath"}


def write_jsonl(path, lines: list[bytes | dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else json.dumps(line).encode())
            fh.write(b"\n")
    return path


def test_jsonl_reads_both_shapes_and_skips_unreadable_lines_with_reasons(tmp_path):
    path = write_jsonl(
        tmp_path / "chat.jsonl", [CHAT, b"", SHAREGPT, b"{broken", b"[1, 2]", b'{"messages": "caf\xe9"}']
    )
    items = list(dataset_source("jsonl").records(str(path)))
    assert [type(i) for i in items] == [RawRecord, RawRecord, SkippedRow, SkippedRow, SkippedRow]
    assert [i.row for i in items] == ["chat.jsonl:1", "chat.jsonl:3", "chat.jsonl:4", "chat.jsonl:5", "chat.jsonl:6"]
    broken, not_object, not_utf8 = items[2:]
    assert broken.kind == "unreadable" and "not valid JSON" in broken.reason
    assert not_object.kind == "unreadable" and "JSON object" in not_object.reason
    assert not_utf8.kind == "not_utf8" and "UTF-8" in not_utf8.reason
    assert all(isinstance(classify("jsonl", i), Prompt) for i in items[:2])


def test_jsonl_location_may_be_a_folder_or_a_glob(tmp_path):
    write_jsonl(tmp_path / "d" / "a.jsonl", [CHAT])
    write_jsonl(tmp_path / "d" / "sub" / "b.jsonl", [SHAREGPT])
    (tmp_path / "d" / "notes.txt").write_text("not data")
    source = dataset_source("jsonl")
    by_folder = [r.row for r in source.records(str(tmp_path / "d"))]
    by_glob = [r.row for r in source.records(str(tmp_path / "d" / "**" / "*.jsonl"))]
    assert by_folder == by_glob == ["a.jsonl:1", "sub/b.jsonl:1"]


def test_file_version_follows_content_not_location(tmp_path):
    source = dataset_source("jsonl")
    first = write_jsonl(tmp_path / "one" / "x.jsonl", [CHAT])
    copy = tmp_path / "two" / "x.jsonl"
    copy.parent.mkdir()
    shutil.copy(first, copy)
    assert source.resolved_version(str(first)) == source.resolved_version(str(copy))
    write_jsonl(copy, [CHAT, SHAREGPT])
    assert source.resolved_version(str(first)) != source.resolved_version(str(copy))


@pytest.mark.parametrize("kind", ["none", "missing", "empty_folder"])
def test_unusable_locations_name_the_source_and_the_fix(tmp_path, kind):
    location = {"none": None, "missing": str(tmp_path / "nope.jsonl"), "empty_folder": str(tmp_path)}[kind]
    with pytest.raises(SourceUnavailable, match="source 'jsonl'") as err:
        list(dataset_source("jsonl").records(location))
    assert "location" in str(err.value)


def test_parquet_reads_list_of_struct_columns_in_both_shapes(tmp_path):
    messages = pa.array(
        [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]],
        type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    )
    pq.write_table(pa.table({"messages": messages, "id": ["a1"]}), tmp_path / "openai.parquet")
    pq.write_table(pa.Table.from_pylist([SHAREGPT]), tmp_path / "sharegpt.parquet")
    items = list(dataset_source("parquet").records(str(tmp_path)))
    assert [i.row for i in items] == ["openai.parquet#0", "sharegpt.parquet#0"]
    prompts = [classify("parquet", i) for i in items]
    assert [p.reference for p in prompts] == ["Hello!", "4"]
    assert prompts[0].source_id == "a1"


def test_parquet_binary_content_that_is_not_utf8_is_skipped(tmp_path):
    turns = pa.array(
        [[{"role": "user", "content": b"caf\xe9"}]],
        type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.binary())])),
    )
    pq.write_table(pa.table({"messages": turns}), tmp_path / "bin.parquet")
    [item] = dataset_source("parquet").records(str(tmp_path / "bin.parquet"))
    assert classify("parquet", item).reason == "not_utf8"


def test_unreadable_parquet_fails_before_any_row(tmp_path):
    pq.write_table(pa.Table.from_pylist([SHAREGPT]), tmp_path / "a_good.parquet")
    (tmp_path / "b_bad.parquet").write_text('{"messages": []}\n')
    rows = dataset_source("parquet").records(str(tmp_path))
    with pytest.raises(SourceUnavailable, match=r"source 'parquet'.*b_bad.parquet.*not a readable Parquet"):
        next(rows)


def test_demo_set_is_bundled_varied_and_answered_in_textbook_style():
    source = dataset_source("demo")
    prompts = [classify("demo", r) for r in source.records()]
    assert all(isinstance(p, Prompt) for p in prompts)
    arithmetic = [p for p in prompts if p.metadata["task"] == "arithmetic"]
    chat = [p for p in prompts if p.metadata["task"] == "chat"]
    assert len(arithmetic) == 640 and 70 <= len(chat) <= 90
    assert all(p.reference and str(p.metadata["expected"]) in p.reference for p in arithmetic)
    # Not the tiny verifier's worked style ("The answer is N." after column-by-column thinking).
    assert not any(p.reference.startswith("The answer is") for p in arithmetic)
    assert any(len(p.messages) > 2 for p in chat)
    assert any(p.messages[0]["role"] == "system" for p in chat)
    assert len(source.resolved_version()) == 16


def test_open_perfectblend_loads_a_local_copy_through_datasets(tmp_path):
    path = write_jsonl(
        tmp_path / "perfectblend.jsonl",
        [
            {
                "conversations": [
                    {"from": "system", "value": "Be brief."},
                    {"from": "human", "value": "Hi"},
                    {"from": "gpt", "value": "Hello!"},
                ],
                "source": "airoboros",
            },
            SHAREGPT,
        ],
    )
    source = dataset_source("open_perfectblend")
    items = list(source.records(str(path)))
    assert [i.row for i in items] == ["perfectblend.jsonl#0", "perfectblend.jsonl#1"]
    prompts = [classify("open_perfectblend", i) for i in items]
    assert [p.metadata["source"] for p in prompts] == ["airoboros", "metamath"]
    assert prompts[0].messages[0] == {"role": "system", "content": "Be brief."}
    assert [p.reference for p in prompts] == ["Hello!", "4"]
    assert source.resolved_version(str(path)) == dataset_source("jsonl").resolved_version(str(path))
    pq.write_table(pa.Table.from_pylist([SHAREGPT]), tmp_path / "perfectblend.parquet")
    [from_parquet] = source.records(str(tmp_path / "perfectblend.parquet"))
    assert from_parquet.data["conversations"] == SHAREGPT["conversations"]
