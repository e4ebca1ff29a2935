"""The evaluation-suite hook and the built-in suites, read through Hugging Face ``datasets`` from small files of
each hub dataset's own shape that the tests write (no network here): MT-Bench's two turns, GSM8K, HumanEval,
MATH-500 and AIME; a bad row skipped under a named reason; a missing suite naming the location to set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_assets import plugin_manager
from eagle_assets.sources import SkippedRow
from eagle_assets.suites import EvalSuite, SuitePrompt, SuiteUnavailable


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read(name: str, location: Path) -> list:
    return list(plugin_manager.eval_suite(name).prompts(str(location)))


def test_the_builtin_suites_are_registered_through_the_hook():
    registered = plugin_manager.eval_suite_registrations()
    assert {name: plugin for name, (_, plugin) in registered.items()} == dict.fromkeys(
        ["aime", "gsm8k", "humaneval", "math500", "mt_bench"], "eagle_assets.plugins.eval_suites"
    )
    assert {name: s.category for name, (s, _) in registered.items()} == {
        "aime": "math",
        "gsm8k": "math",
        "humaneval": "code",
        "math500": "math",
        "mt_bench": "chat",
    }


def test_mt_bench_in_the_hub_shape_and_in_fastchats_shape(tmp_path):
    hub = write_parquet(
        tmp_path / "hub" / "data" / "train-00000-of-00001.parquet",
        [
            {"prompt": ["Write a poem.", "Shorter."], "prompt_id": 11, "category": "writing", "reference": []},
            {"prompt": ["2+2?", "And 3+3?"], "prompt_id": 12, "category": "math", "reference": ["4", "6"]},
        ],
    )
    prompts = read("mt_bench", hub.parents[1])  # the folder as the hub dataset downloads it
    assert prompts == [
        SuitePrompt("11", ("Write a poem.", "Shorter."), "writing"),
        SuitePrompt("12", ("2+2?", "And 3+3?"), "math"),
    ]
    # The conversation to replay: an empty assistant answer between the turns, for the verifier's own.
    assert [m["role"] for m in prompts[0].messages()] == ["user", "assistant", "user"]
    fastchat = write_jsonl(
        tmp_path / "question.jsonl", [{"question_id": 81, "category": "roleplay", "turns": ["a", "b"]}]
    )
    assert read("mt_bench", fastchat) == [SuitePrompt("81", ("a", "b"), "roleplay")]


def test_single_turn_suites_read_their_hub_shapes(tmp_path):
    gsm8k = tmp_path / "gsm8k"
    write_parquet(
        gsm8k / "main" / "test-00000-of-00001.parquet", [{"question": "Tom has 3 apples…", "answer": "#### 3"}]
    )
    write_parquet(gsm8k / "main" / "train-00000-of-00001.parquet", [{"question": "not this split", "answer": "1"}])
    assert read("gsm8k", gsm8k) == [SuitePrompt("0", ("Tom has 3 apples…",), "math")]

    humaneval = write_parquet(
        tmp_path / "humaneval" / "openai_humaneval" / "test-00000-of-00001.parquet",
        [{"task_id": "HumanEval/0", "prompt": "def f(x):\n", "canonical_solution": "", "test": "", "entry_point": "f"}],
    )
    assert read("humaneval", humaneval.parents[1]) == [SuitePrompt("HumanEval/0", ("def f(x):\n",), "code")]

    math500 = write_jsonl(
        tmp_path / "math500" / "test.jsonl",
        [
            {
                "problem": "Solve x+1=2.",
                "solution": "",
                "answer": "1",
                "subject": "Algebra",
                "level": 1,
                "unique_id": "u1",
            }
        ],
    )
    [problem] = read("math500", math500.parent)
    assert problem.prompt_id == "u1" and problem.category == "Algebra"
    assert problem.turns[0].startswith("Solve x+1=2.\nPlease reason step by step") and "\\boxed{}" in problem.turns[0]

    aime = write_parquet(tmp_path / "aime.parquet", [{"ID": "2024-I-1", "Problem": "Find n.", "Answer": 5}])
    [problem] = read("aime", aime)
    assert problem.prompt_id == "2024-I-1" and problem.turns[0].startswith("Find n.\n")


def test_a_bad_row_is_skipped_under_a_named_reason_and_the_rest_are_kept(tmp_path):
    rows = [
        {"question": "fine", "answer": "1"},
        {"question": "   ", "answer": "2"},
        {"question": None, "answer": "3"},
        {"question": "fine too", "answer": "4"},
    ]
    prompts = read("gsm8k", write_jsonl(tmp_path / "test.jsonl", rows))
    assert [p.turns[0] for p in prompts if isinstance(p, SuitePrompt)] == ["fine", "fine too"]
    skipped = [p for p in prompts if isinstance(p, SkippedRow)]
    assert [(s.row, s.kind) for s in skipped] == [("test.jsonl#1", "empty_text"), ("test.jsonl#2", "missing_field")]
    assert skipped[1].reason == "no 'question' field: the row needs 'question'"
    turns = read("mt_bench", write_jsonl(tmp_path / "q.jsonl", [{"question_id": 1, "turns": []}]))
    assert [(s.kind, s.row) for s in turns] == [("no_turns", "q.jsonl#0")]


def test_a_missing_suite_names_the_location_to_set(tmp_path, monkeypatch):
    gsm8k = plugin_manager.eval_suite("gsm8k")
    with pytest.raises(SuiteUnavailable) as missing:
        gsm8k.resolved_version(str(tmp_path / "nowhere.jsonl"))
    message = str(missing.value)
    assert "nowhere.jsonl' does not exist" in message
    assert "Set eagle3_eval's suite_locations: {gsm8k: <location>}" in message and "rows with 'question'" in message
    # No hub access and nothing in the Hugging Face cache (both tries fail): the same advice, naming the hub id.
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("no network" if not kwargs.get("local_files_only") else "not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SuiteUnavailable, match=r"hub dataset 'openai/gsm8k' could not be read \(OSError: no network; "):
        list(gsm8k.prompts())
    # A folder of the wrong shape says what it holds and what it looked for.
    write_jsonl(tmp_path / "other" / "sub" / "train.jsonl", [{"question": "x"}])
    with pytest.raises(SuiteUnavailable, match=r"holds no file matching \['main/test-\*.parquet'.*sub/train.jsonl"):
        list(gsm8k.prompts(str(tmp_path / "other")))


def test_a_hub_snapshot_is_read_like_a_local_folder_and_versioned_by_its_commit(tmp_path, monkeypatch):
    snapshot = tmp_path / "snapshots" / "0123456789abcdef0123"
    write_parquet(snapshot / "data" / "train-00000-of-00001.parquet", [{"id": 60, "problem": "p", "answer": "1"}])
    asked = {}

    def snapshot_download(repo, **kwargs):
        asked.update(repo=repo, **kwargs)
        return str(snapshot)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    aime = plugin_manager.eval_suite("aime")
    assert [p.prompt_id for p in aime.prompts("HuggingFaceH4/aime_2024@v2")] == ["60"]
    assert asked["repo"] == "HuggingFaceH4/aime_2024" and asked["revision"] == "v2"
    assert asked["repo_type"] == "dataset" and "data/train-*.parquet" in asked["allow_patterns"]
    assert aime.resolved_version() == "1+0123456789ab"
    local = write_parquet(tmp_path / "aime.parquet", [{"id": 60, "problem": "p", "answer": "1"}])
    assert aime.resolved_version(str(local)).startswith("1+") and aime.resolved_version(str(local)) != "1+"


def test_a_plugin_registers_its_own_suite_and_a_wrong_object_is_a_load_error(tmp_path):
    plugin = tmp_path / "my_suites.py"
    plugin.write_text(
        "from eagle_assets import hookimpl\n"
        "from eagle_assets.suites import EvalSuite, SuitePrompt\n"
        "class Mine(EvalSuite):\n"
        "    def prompts(self, location=None):\n"
        "        yield SuitePrompt('q1', ('hello?',), self.category)\n"
        "@hookimpl\n"
        "def register_eval_suites(register):\n"
        "    register(Mine(name='mine', description='my prompts', category='chat'))\n"
        "    register('not a suite')\n"
    )
    try:
        # Named in a mapping of the test's own: the background resources' processes inherit os.environ.
        plugin_manager.load_plugins({**os.environ, plugin_manager.PLUGINS_ENV: str(plugin)})
        mine = plugin_manager.eval_suite("mine")
        assert isinstance(mine, EvalSuite) and [p.prompt_id for p in mine.prompts()] == ["q1"]
        plugin_manager.eval_suites()  # the second register() raises: recorded, the plugin's first suite kept
        [error] = [e for e in plugin_manager.load_errors if e.plugin == str(plugin)]
        assert "register_eval_suites: TypeError: register() for eval suites needs a EvalSuite, got str" in error.error
    finally:
        plugin_manager.load_plugins()
    assert "mine" not in plugin_manager.eval_suites()
