"""Quality classes of captured samples: the pure classifier on hand-made token ids, the class store beside
the shards (old shards included), the token_sequences policy per class."""

from __future__ import annotations

import asyncio

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from eagle_assets.core.files import write_parquet
from eagle_assets.core.layout import LAST_TURN_ONLY
from eagle_assets.reasoning_samples.asset import quality_check_result
from eagle_assets.reasoning_samples.engine import CaptureEngine
from eagle_assets.reasoning_samples.parsing import parse_completion
from eagle_assets.reasoning_samples.quality import (
    QUALITY_CLASSES,
    Loop,
    QualityRules,
    Thinking,
    ThinkMarkers,
    classify,
    find_loop,
    thinking_span,
)
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import SCHEMA, done_prompt_ids, load_classified, load_samples, write_quality
from eagle_assets.token_sequences.build import Policy, build_rows

START, END, STOP = 3, 4, 2
MARKERS = ThinkMarkers(START, END)
RULES = QualityRules(min_thinking_tokens=5, loop_ngram=4, loop_min_repeats=3, loop_max_share=0.3)
RNG = np.random.default_rng(0)


def prose(n: int) -> list[int]:
    """Token ids without repeats (distinct ids: no n-gram occurs twice)."""
    return list(RNG.permutation(np.arange(100, 100 + n)))


def reply(thinking: int = 20, answer: int = 10) -> list[int]:
    return prose(thinking) + [END] + prose(answer) + [STOP]


def verdict(token_ids, finish="stop", content="The answer.", status="ok", prompt=(1, 5, START)):
    thinking = thinking_span(prompt, token_ids or [], MARKERS)
    return classify(status, finish, token_ids, content, thinking.tokens, thinking.unfinished, RULES)


# ----------------------------------------------------------------------------------- thinking span
def test_thinking_span_from_marker_ids():
    assert thinking_span([1, START], [7, 8, 9, END, 5, STOP], MARKERS) == Thinking(3, False)
    assert thinking_span([1, START], [7, 8, 9], MARKERS) == Thinking(3, True)  # never closed
    # Thinking off: the template closed an empty block in the prompt; the completion has no thinking.
    assert thinking_span([1, START, END], [5, 6, STOP], MARKERS) == Thinking(None, False)
    # An earlier turn's closed thinking in the prompt, and a completion that opens its own block.
    assert thinking_span([START, 9, END, 1], [START, 7, END, 5], MARKERS) == Thinking(1, False)
    assert thinking_span([1, 2], [5, 6, STOP], MARKERS) == Thinking(None, False)


# ----------------------------------------------------------------------------------- loops
def test_find_loop_marks_where_a_repetition_starts_and_how_much_it_covers():
    head = prose(50)
    looped = head + [11, 12, 13, 14, 15] * 20  # period 5 from token 50 on
    loop = find_loop(looped, ngram=4, min_repeats=3)
    assert loop.start == 50 and loop.share == pytest.approx(100 / 150)
    assert find_loop(prose(150), ngram=4, min_repeats=3) == find_loop([], ngram=4, min_repeats=3) == Loop(0.0, None)


def test_find_loop_catches_a_period_longer_than_the_ngram():
    period = prose(40)
    loop = find_loop(prose(30) + period * 5, ngram=8, min_repeats=3)
    assert loop.start == 30 and loop.share == pytest.approx(200 / 230)


# ----------------------------------------------------------------------------------- classes
def test_each_class_on_hand_made_token_ids():
    assert verdict(reply()).quality == "ok"
    assert verdict(None, status="error", content=None).quality == "error"
    assert verdict(prose(30) + [END] + prose(5), finish="length").quality == "truncated"
    assert verdict(prose(30), finish="length", content=None).quality == "unfinished_thinking"
    assert verdict(prose(30) + [STOP], content=None).quality == "unfinished_thinking"  # stopped inside thinking
    assert verdict(prose(30) + [END, STOP], content=None).quality == "empty_answer"
    assert verdict(reply(thinking=3)).quality == "trivial_reasoning"
    # Thinking off is not trivial reasoning: there is no thinking section to judge.
    assert verdict(prose(10) + [STOP], prompt=(1, START, END)).quality == "ok"
    looped = verdict(prose(20) + [21, 22, 23] * 30, finish="length", content=None)
    assert looped.quality == "repetition_loop" and looped.loop_start == 20


def test_precedence_follows_the_documented_order():
    assert QUALITY_CLASSES[0] == "error" and QUALITY_CLASSES[-1] == "ok"
    # A loop that ran into max_tokens inside the thinking: the loop is the cause.
    assert verdict(prose(10) + [21, 22, 23] * 30, finish="length", content=None).quality == "repetition_loop"
    # Cut inside the thinking: unfinished_thinking, not truncated.
    assert verdict(prose(30), finish="length", content=None).quality == "unfinished_thinking"
    # A short thinking that was cut during the answer is truncated first.
    assert verdict(prose(2) + [END] + prose(5), finish="length").quality == "truncated"


def test_parse_completion_places_the_thinking_end_by_marker_ids_or_by_the_parser():
    def body(token_ids, reasoning, content, finish="stop", usage=None):
        return {
            "model": "m",
            "prompt_token_ids": [1, START],
            "usage": usage or {},
            "choices": [
                {
                    "message": {"reasoning": reasoning, "content": content},
                    "finish_reason": finish,
                    "token_ids": token_ids,
                }
            ],
        }

    # The parser's text split cannot tell "closed, empty answer" from "never closed"; the ids can.
    empty = parse_completion(body([7, 8, END, STOP], "seven eight", None), MARKERS)
    assert (empty["thinking_tokens"], empty["unfinished_thinking"]) == (2, False)
    cut = parse_completion(body([7, 8, 9], "seven eight nine", None, "length"), MARKERS)
    assert (cut["thinking_tokens"], cut["unfinished_thinking"]) == (3, True)
    # Without marker ids: the server's reasoning parser count and split.
    usage = {"completion_tokens_details": {"reasoning_tokens": 2}}
    parsed = parse_completion(body([7, 8, END, 5, STOP], "seven eight", "five", usage=usage))
    assert (parsed["thinking_tokens"], parsed["unfinished_thinking"]) == (2, False)
    off = parse_completion(body([5, STOP], None, "five", usage={"completion_tokens_details": {"reasoning_tokens": 0}}))
    assert off["thinking_tokens"] is None


def test_the_engine_asks_the_server_for_the_marker_ids():
    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            marker = __import__("json").loads(request.content)["prompt"]
            return httpx.Response(200, json={"tokens": [{"<think>": START, "</think>": END}[marker]]})
        return httpx.Response(404)

    engine = CaptureEngine(["http://a/v1"], Sampling(), transport=httpx.MockTransport(server))
    assert asyncio.run(engine.resolve_think_markers()) == MARKERS
    multi = CaptureEngine(
        ["http://a/v1"],
        Sampling(),
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"tokens": [60, 61]})),
    )
    assert asyncio.run(multi.resolve_think_markers()) is None  # not one token: the parser's split is used


# ----------------------------------------------------------------------------------- store and old shards
SHARD_1, SHARD_2 = "shard-00000000000000000001-1-000001.parquet", "shard-00000000000000000002-1-000001.parquet"


def row(prompt_id: str, token_ids, finish="stop", content="answer", finished_at=1.0, **fields) -> dict:
    return {
        "prompt_id": prompt_id,
        "turn": LAST_TURN_ONLY,
        "split": "train",
        "status": "ok",
        "finish_reason": finish,
        "content": content,
        "reasoning": "thinking",
        "prompt_token_ids": [1, START],
        "token_ids": token_ids,
        "completion_tokens": len(token_ids),
        "truncated": finish == "length",
        "finished_at": finished_at,
        **fields,
    }


def test_shards_from_before_the_classes_load_are_classified_on_read_and_resume(tmp_path):
    old_schema = pa.schema([f for f in SCHEMA if f.name != "thinking_tokens"])
    rows = [
        row("a", reply()),
        row("b", prose(30), finish="length", content=None, unfinished_thinking=True),
        row("c", prose(20) + [21, 22, 23] * 30, finish="length"),
    ]
    write_parquet(pa.Table.from_pylist(rows, schema=old_schema), tmp_path / SHARD_1)

    assert done_prompt_ids(tmp_path) == {"a", "b", "c"}  # resume still skips them
    assert load_samples(tmp_path)["thinking_tokens"].null_count == 3
    samples, rules = load_classified(tmp_path)  # no quality file yet: classified on read, default rules
    assert rules == QualityRules()
    assert samples["quality"].to_pylist() == ["ok", "unfinished_thinking", "repetition_loop"]


def test_stored_classes_are_used_and_a_newer_row_of_a_prompt_is_classified_anew(tmp_path):
    write_parquet(
        pa.Table.from_pylist(
            [row("a", reply(thinking=3), thinking_tokens=3), row("b", reply(), thinking_tokens=20)], schema=SCHEMA
        ),
        tmp_path / SHARD_1,
    )
    write_quality(tmp_path, load_samples(tmp_path), RULES)
    samples, rules = load_classified(tmp_path)
    assert rules == RULES and samples["quality"].to_pylist() == ["trivial_reasoning", "ok"]
    # "a" is captured again (a newer row): its stored class belongs to the older row.
    write_parquet(
        pa.Table.from_pylist(
            [row("a", prose(30), finish="length", content=None, unfinished_thinking=True, finished_at=2.0)],
            schema=SCHEMA,
        ),
        tmp_path / SHARD_2,
    )
    samples, _ = load_classified(tmp_path)
    assert samples["quality"].to_pylist() == ["unfinished_thinking", "ok"]


# ----------------------------------------------------------------------------------- policies
def classified_table(rows: list[dict]) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    classes = [verdict(r["token_ids"], r["finish_reason"], r["content"]) for r in rows]
    return table.append_column("quality", pa.array([v.quality for v in classes])).append_column(
        "loop_start", pa.array([v.loop_start for v in classes], pa.int32())
    )


def no_render(*_):
    raise AssertionError("server tokens are used as they are")


def test_policy_drops_keeps_or_cuts_per_class():
    loop_ids = prose(20) + [21, 22, 23] * 30
    samples = classified_table(
        [
            row("ok", reply()),
            row("cut", prose(30), finish="length", content=None),
            row("loop", loop_ids, finish="length"),
            row("all-loop", [21, 22, 23] * 30),
        ]
    )
    splits = dict.fromkeys(["ok", "cut", "loop", "all-loop"], "train")
    kept = build_rows(samples, {}, splits, no_render, Policy(1000, "truncate", ("train",)))
    assert kept.prompt_ids == ["ok", "cut", "loop", "all-loop"] and not kept.skipped

    policy = Policy(1000, "truncate", ("train",), {"unfinished_thinking": "drop", "repetition_loop": "cut"})
    built = build_rows(samples, {}, splits, no_render, policy)
    assert built.prompt_ids == ["ok", "loop"] and built.cut_at_loop == 1
    assert built.skipped == {"quality_unfinished_thinking": 1, "quality_repetition_loop": 1}  # all-loop: nothing left
    table = built.table().to_pylist()
    assert table[1]["input_ids"] == [1, START] + loop_ids[:20]  # ends where the loop starts


def test_failed_quality_check_names_the_classes_their_shares_and_what_to_change():
    meta = {
        "quality/non_ok_share": 0.5,
        **{f"quality/{c}": 0 for c in QUALITY_CLASSES},
        **{f"quality/{c}_share": 0.0 for c in QUALITY_CLASSES},
    }
    meta.update(
        {
            "quality/unfinished_thinking": 3,
            "quality/unfinished_thinking_share": 0.375,
            "quality/repetition_loop": 1,
            "quality/repetition_loop_share": 0.125,
        }
    )
    result = quality_check_result(meta, limit=0.2)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.metadata["unfinished_thinking_share"].value == 0.375 and result.metadata["repetition_loop"].value == 1
    assert "max_tokens" in result.description and "unfinished_thinking 37.5%" in result.description
    assert "truncated" not in result.metadata  # classes not seen are not named
    assert quality_check_result(meta, limit=0.5).passed
