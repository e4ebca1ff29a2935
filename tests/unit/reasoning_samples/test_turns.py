"""``turns: all``: every assistant turn regenerated in order, with the verifier's own earlier answers: the
turn split, the contexts, the per-turn resume and store, the drift check's turns, the engine's ordering
(mock transport)."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from eagle_assets.core.layout import LAST_TURN_ONLY
from eagle_assets.core.tables import table_version
from eagle_assets.reasoning_samples.engine import CaptureEngine, ClientSettings
from eagle_assets.reasoning_samples.progress import Progress
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import (
    VERSIONED_COLUMNS,
    ShardWriter,
    done_turns,
    load_classified,
    load_samples,
    turn_mode,
)
from eagle_assets.reasoning_samples.turns import Answer, Conversation, pending_conversations, turn_context, user_turns

SYSTEM = {"role": "system", "content": "Be brief."}
CONVERSATION = [
    SYSTEM,
    {"role": "user", "content": "u0"},
    {"role": "assistant", "content": "dataset a0"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "dataset a1"},
    {"role": "user", "content": "u2"},
]


def test_the_dataset_answers_are_dropped_and_each_turn_is_asked_with_the_verifiers_own():
    assert [[m["content"] for m in t] for t in user_turns(CONVERSATION)] == [["Be brief.", "u0"], ["u1"], ["u2"]]
    # Two user messages in a row are one turn: nothing was answered between them.
    assert len(user_turns([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])) == 1
    answers = [Answer("mine 0", "thought 0"), Answer(None, "cut off")]
    context = turn_context(CONVERSATION, 2, answers)
    assert [(m["role"], m["content"]) for m in context] == [
        ("system", "Be brief."),
        ("user", "u0"),
        ("assistant", "mine 0"),
        ("user", "u1"),
        ("assistant", ""),
        ("user", "u2"),
    ]
    assert context[2]["reasoning"] == context[2]["reasoning_content"] == "thought 0"
    assert turn_context(CONVERSATION, 0, []) == [SYSTEM, CONVERSATION[1]]
    with pytest.raises(ValueError, match="needs 2 earlier answers"):
        turn_context(CONVERSATION, 2, answers[:1])


def test_resume_starts_each_conversation_at_its_first_turn_not_stored():
    prompts = [("done", CONVERSATION, "train"), ("half", CONVERSATION, "train"), ("new", CONVERSATION, None)]
    stored = {("done", t): Answer(f"d{t}", None) for t in range(3)}
    stored |= {("half", 0): Answer("h0", "r0"), ("half", 2): Answer("orphan", None)}
    pending = pending_conversations(prompts, stored)
    assert [(c.prompt_id, c.next_turn, c.turns_left) for c in pending] == [("half", 1, 2), ("new", 0, 3)]
    assert pending[0].answers == [Answer("h0", "r0")]  # turn 1 is asked with the stored turn 0


def turn_row(prompt_id: str, turn: int, status: str = "ok", finished_at: float = 0.0) -> dict:
    return {
        "prompt_id": prompt_id,
        "turn": turn,
        "split": "train",
        "status": status,
        "content": f"a{turn}",
        "reasoning": f"r{turn}",
        "finish_reason": "stop",
        "prompt_token_ids": [1, 2],
        "token_ids": [3, turn],
        "prompt_tokens": 2,
        "completion_tokens": 2,
        "truncated": False,
        "unfinished_thinking": False,
        "finished_at": finished_at,
    }


def test_the_store_keeps_one_row_per_turn_and_each_turn_mode_has_a_sample_set_of_its_own(tmp_path):
    from eagle_assets.reasoning_samples.recipe import Recipe
    from eagle_assets.reasoning_samples.sample_sets import SettingsChanged, open_sample_set
    from tests.helpers.upstream import model_folder, served_from

    verifier = served_from(model_folder(tmp_path / "model"))
    every_turn, last_turn = (Recipe.of(verifier, Sampling(), [], mode) for mode in ("all", "last"))
    assert every_turn.recipe_id != last_turn.recipe_id
    partition = tmp_path / "partition"
    folder = open_sample_set(partition, every_turn, "refuse").folder
    with ShardWriter(folder, rows_per_shard=2, recipe=every_turn.recipe_id) as writer:
        writer.add(turn_row("p", 0, finished_at=2.0))
        writer.add(turn_row("p", 1, status="error", finished_at=3.0))
        writer.add(turn_row("p", 1, finished_at=4.0))  # the retry of turn 1: it replaces the error
    samples = load_samples(folder)
    assert list(zip(samples["turn"].to_pylist(), samples["status"].to_pylist())) == [(0, "ok"), (1, "ok")]
    assert done_turns(folder) == {("p", 0): Answer("a0", "r0"), ("p", 1): Answer("a1", "r1")}
    classified, _ = load_classified(folder)
    assert classified.num_rows == 2 and None not in classified["quality"].to_pylist()
    assert turn_mode(folder) == "all"

    # Switching the mode over a set with ok samples is a change of settings: refused, naming it ...
    with pytest.raises(SettingsChanged, match='turns "all" -> "last"'):
        open_sample_set(partition, last_turn, "refuse")
    # ... or a set of its own, which never sees the other mode's rows.
    last_folder = open_sample_set(partition, last_turn, "new_sample_set").folder
    assert last_folder != folder and load_samples(last_folder).num_rows == 0 and turn_mode(last_folder) == "last"
    with ShardWriter(last_folder, recipe=last_turn.recipe_id) as writer:
        writer.add(turn_row("p", LAST_TURN_ONLY, finished_at=1.0))
    assert load_samples(last_folder)["turn"].to_pylist() == [LAST_TURN_ONLY]
    assert table_version(load_samples(last_folder), VERSIONED_COLUMNS) != table_version(samples, VERSIONED_COLUMNS)
    assert load_samples(folder)["turn"].to_pylist() == [0, 1]
    with pytest.raises(ValueError, match="turns 'every'"):
        Recipe.of(verifier, Sampling(), [], "every")


def test_the_drift_check_renders_only_the_turns_it_checks_and_skips_those_whose_earlier_answer_is_gone():
    from eagle_assets.token_sequences.drift import measure_drift

    # Conversation "c" lost its turn 0 (e.g. an error row was dropped): its turns 1 and 2 cannot be rebuilt.
    keys = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2), ("c", 1), ("c", 2)]
    samples = pa.table(
        {
            "prompt_id": [k[0] for k in keys],
            "turn": pa.array([k[1] for k in keys], pa.int32()),
            "status": ["ok"] * len(keys),
            "prompt_token_ids": [[1, 2]] * len(keys),
            "token_ids": [[5]] * len(keys),
            "reasoning": ["r"] * len(keys),
            "content": [f"{p}{t}" for p, t in keys],
            "sampling": ["{}"] * len(keys),
        }
    )
    rendered = []

    def render(context, reasoning, content, template_kwargs):
        rendered.append(context)
        return [1, 2], [5]

    for size in (3, 20):
        rendered.clear()
        report = measure_drift(samples, dict.fromkeys("abc", CONVERSATION), render, sample_size=size)
        assert report.checked == len(rendered) == min(size, 6)  # c's two turns are never rendered
        assert report.prompt_mismatches == report.completion_mismatches == 0
    # The earlier answers in a rebuilt context are that conversation's own stored ones.
    assert any([m["content"] for m in c if m["role"] == "assistant"] == ["a0", "a1"] for c in rendered)


def test_the_engine_asks_a_conversations_turns_in_order_and_stops_at_a_failed_turn():
    asked: list[list[dict]] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        if request.url.path in ("/version", "/tokenize"):
            return httpx.Response(404)
        messages = json.loads(request.content)["messages"]
        asked.append(messages)
        last = messages[-1]["content"]
        if last == "fail":
            return httpx.Response(400, json={"error": "too long"})
        return httpx.Response(
            200,
            json={
                "model": "tiny",
                "prompt_token_ids": [1],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                "choices": [
                    {
                        "message": {"reasoning": f"why {last}", "content": f"re {last}"},
                        "finish_reason": "stop",
                        "token_ids": [7],
                    }
                ],
            },
        )

    failing = [
        {"role": "user", "content": "x0"},
        {"role": "assistant", "content": "d"},
        {"role": "user", "content": "fail"},
        {"role": "assistant", "content": "d"},
        {"role": "user", "content": "never"},
    ]
    conversations = [
        Conversation("c", CONVERSATION, "train", 1, [Answer("stored 0", "r")]),
        Conversation("f", failing, "train", 0),
    ]
    engine = CaptureEngine(
        ["http://a/v1"],
        Sampling(max_tokens=8),
        ClientSettings(concurrency=2, max_retries=0),
        transport=httpx.MockTransport(server),
    )
    rows: list[dict] = []
    asyncio.run(engine.run(conversations, rows.append, Progress(total=5)))
    by_key = {(r["prompt_id"], r["turn"]): r for r in rows}
    assert sorted(by_key) == [("c", 1), ("c", 2), ("f", 0), ("f", 1)]  # f's turn 2 needs the failed turn 1
    assert by_key["f", 1]["status"] == "error"
    [turn_2] = [m for m in asked if m[-1]["content"] == "u2"]
    assert [(m["role"], m["content"]) for m in turn_2] == [
        ("system", "Be brief."),
        ("user", "u0"),
        ("assistant", "stored 0"),
        ("user", "u1"),
        ("assistant", "re u1"),
        ("user", "u2"),
    ]
    assert turn_2[4]["reasoning"] == "why u1"
