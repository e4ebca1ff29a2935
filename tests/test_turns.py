"""``turns: all``: every assistant turn regenerated in order, with the verifier's own earlier answers.

Unit tests of the turn split, the contexts, the per-turn resume and the engine's ordering (mock
transport), then one integration test on the session's real vLLM server (the tiny verifier) through
token_sequences.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from kill_mid_capture import kill_after_rows
from transformers import AutoTokenizer

from upstream_rows import PARTITION, demo_prompts

from eagle_assets.reasoning_samples.engine import CaptureEngine, ClientSettings, Sampling
from eagle_assets.reasoning_samples.progress import Progress
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import (
    ShardWriter,
    content_hash,
    done_turns,
    load_classified,
    load_samples,
    shard_paths,
    write_turn_mode,
)
from eagle_assets.reasoning_samples.turns import (
    LAST_TURN_ONLY,
    Answer,
    Conversation,
    pending_conversations,
    turn_context,
    user_turns,
)

SYSTEM = {"role": "system", "content": "Be brief."}
CONVERSATION = [SYSTEM, {"role": "user", "content": "u0"}, {"role": "assistant", "content": "dataset a0"},
                {"role": "user", "content": "u1"}, {"role": "assistant", "content": "dataset a1"},
                {"role": "user", "content": "u2"}]


def test_the_dataset_answers_are_dropped_and_each_turn_is_asked_with_the_verifiers_own():
    assert [[m["content"] for m in t] for t in user_turns(CONVERSATION)] == [["Be brief.", "u0"], ["u1"], ["u2"]]
    # Two user messages in a row are one turn: nothing was answered between them.
    assert len(user_turns([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])) == 1
    answers = [Answer("mine 0", "thought 0"), Answer(None, "cut off")]
    context = turn_context(CONVERSATION, 2, answers)
    assert [(m["role"], m["content"]) for m in context] == [
        ("system", "Be brief."), ("user", "u0"), ("assistant", "mine 0"), ("user", "u1"), ("assistant", ""),
        ("user", "u2")]
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
    return {"prompt_id": prompt_id, "turn": turn, "split": "train", "status": status, "content": f"a{turn}",
            "reasoning": f"r{turn}", "finish_reason": "stop", "prompt_token_ids": [1, 2], "token_ids": [3, turn],
            "prompt_tokens": 2, "completion_tokens": 2, "truncated": False, "unfinished_thinking": False,
            "finished_at": finished_at}


def test_the_store_keeps_one_row_per_turn_and_readers_see_only_the_chosen_mode(tmp_path):
    with ShardWriter(tmp_path, rows_per_shard=2) as writer:
        writer.add({**turn_row("p", LAST_TURN_ONLY, finished_at=1.0)})
        writer.add(turn_row("p", 0, finished_at=2.0))
        writer.add(turn_row("p", 1, status="error", finished_at=3.0))
        writer.add(turn_row("p", 1, finished_at=4.0))  # the retry of turn 1: it replaces the error
    write_turn_mode(tmp_path, "all")
    samples = load_samples(tmp_path)
    assert list(zip(samples["turn"].to_pylist(), samples["status"].to_pylist())) == [(0, "ok"), (1, "ok")]
    assert done_turns(tmp_path) == {("p", 0): Answer("a0", "r0"), ("p", 1): Answer("a1", "r1")}
    classified, _ = load_classified(tmp_path)
    assert classified.num_rows == 2 and None not in classified["quality"].to_pylist()
    all_version = content_hash(samples)
    write_turn_mode(tmp_path, "last")
    assert load_samples(tmp_path)["turn"].to_pylist() == [LAST_TURN_ONLY]
    assert content_hash(load_samples(tmp_path)) != all_version
    with pytest.raises(ValueError, match="turns 'every'"):
        write_turn_mode(tmp_path, "every")


def test_the_drift_check_renders_only_the_turns_it_checks_and_skips_those_whose_earlier_answer_is_gone():
    from eagle_assets.token_sequences.build import measure_drift

    # Conversation "c" lost its turn 0 (e.g. an error row was dropped): its turns 1 and 2 cannot be rebuilt.
    keys = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2), ("c", 1), ("c", 2)]
    samples = pa.table({
        "prompt_id": [k[0] for k in keys], "turn": pa.array([k[1] for k in keys], pa.int32()),
        "status": ["ok"] * len(keys), "prompt_token_ids": [[1, 2]] * len(keys), "token_ids": [[5]] * len(keys),
        "reasoning": ["r"] * len(keys), "content": [f"{p}{t}" for p, t in keys], "sampling": ["{}"] * len(keys)})
    rendered = []

    def render(context, reasoning, content, template_kwargs):
        rendered.append(context)
        return [1, 2], [5]

    for size in (3, 20):
        rendered.clear()
        report = measure_drift(samples, {pid: CONVERSATION for pid in "abc"}, render, sample_size=size)
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
        return httpx.Response(200, json={
            "model": "tiny", "prompt_token_ids": [1], "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            "choices": [{"message": {"reasoning": f"why {last}", "content": f"re {last}"}, "finish_reason": "stop",
                         "token_ids": [7]}]})

    failing = [{"role": "user", "content": "x0"}, {"role": "assistant", "content": "d"},
               {"role": "user", "content": "fail"}, {"role": "assistant", "content": "d"},
               {"role": "user", "content": "never"}]
    conversations = [Conversation("c", CONVERSATION, "train", 1, [Answer("stored 0", "r")]),
                     Conversation("f", failing, "train", 0)]
    engine = CaptureEngine(["http://a/v1"], Sampling(max_tokens=8), ClientSettings(concurrency=2, max_retries=0),
                           transport=httpx.MockTransport(server))
    rows: list[dict] = []
    asyncio.run(engine.run(conversations, rows.append, Progress(total=5)))
    by_key = {(r["prompt_id"], r["turn"]): r for r in rows}
    assert sorted(by_key) == [("c", 1), ("c", 2), ("f", 0), ("f", 1)]  # f's turn 2 needs the failed turn 1
    assert by_key["f", 1]["status"] == "error"
    [turn_2] = [m for m in asked if m[-1]["content"] == "u2"]
    assert [(m["role"], m["content"]) for m in turn_2] == [
        ("system", "Be brief."), ("user", "u0"), ("assistant", "stored 0"), ("user", "u1"),
        ("assistant", "re u1"), ("user", "u2")]
    assert turn_2[4]["reasoning"] == "why u1"


# --------------------------------------------------------------------------- real vLLM server
def multi_turn_prompts(storage_root, count: int) -> list[dict]:
    """The demo set's first ``count`` multi-turn conversations, left alone in the prompts table."""
    everything = demo_prompts(storage_root, None)
    chosen = [p for p in everything if len(user_turns(p["messages"])) > 1][:count]
    path = storage_root.path("prompts", PARTITION) / "prompts.parquet"
    table = pq.read_table(path)
    pq.write_table(table.filter(pc.is_in(table["prompt_id"], pc.cast([p["prompt_id"] for p in chosen], "string"))),
                   path)
    return chosen


@pytest.mark.integration
def test_every_turn_is_regenerated_in_order_supervised_and_resumed_per_turn(storage_root, tiny_verifier,
                                                                            vllm_server_urls):
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.token_sequences import asset as token_sequences
    from eagle_assets.hidden_states.files import load_sample
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import Verifier, VLLMServer
    from eagle_assets.eagle3_checkpoint.training_data import _read_partition

    conversations = {p["prompt_id"]: p["messages"] for p in multi_turn_prompts(storage_root, 3)}
    parts = source_partitions()
    built, features = token_sequences.build(parts), hidden_states.build(parts)

    def materialize():
        result = dg.materialize(
            reasoning_samples.build(parts)["assets"] + built["assets"] + built["checks"] + features["assets"]
            + features["checks"], partition_key=PARTITION,
            resources={"storage": storage_root, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu"),
                       "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls)},
            run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 160}}}},
            raise_on_error=False,
        )
        assert result.success
        [mat] = result.asset_materializations_for_node("reasoning_samples")
        return result, mat.metadata

    result, meta = materialize()
    assert meta["turns"].value == "all" and meta["captured_this_run"].value == 6
    assert meta["prompts_selected"].value == 3 and meta["requests_selected"].value == 6 and meta["missing"].value == 0
    folder = storage_root.path("reasoning_samples", PARTITION)
    samples = load_samples(folder).to_pylist()
    assert [(s["prompt_id"], s["turn"]) for s in samples] == [(pid, t) for pid in sorted(conversations) for t in (0, 1)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    for first, second in zip(samples[::2], samples[1::2]):
        assert first["status"] == second["status"] == "ok" and first["content"].strip()
        assert first["finished_at"] <= second["finished_at"] - second["latency_s"]  # asked after turn 0 finished
        # Turn 1 was asked with the verifier's own turn-0 answer (its thinking dropped, as the template does).
        context = turn_context(conversations[first["prompt_id"]], 1, [Answer(first["content"], first["reasoning"])])
        expected = tokenizer.apply_chat_template(context, add_generation_prompt=True, tokenize=False)
        assert second["prompt_token_ids"] == tokenizer.encode(expected, add_special_tokens=False)
        prompt_text = tokenizer.decode(second["prompt_token_ids"])
        assert first["content"].strip() in prompt_text
        dataset_answer = conversations[first["prompt_id"]][1]["content"]
        assert dataset_answer not in prompt_text

    # token_sequences: one row per turn, its exact context unsupervised and its exact answer supervised.
    rows = pq.read_table(storage_root.path("token_sequences", PARTITION) / "sequences.parquet").to_pylist()
    assert [(r["prompt_id"], r["turn"]) for r in rows] == [(s["prompt_id"], s["turn"]) for s in samples]
    for row, sample in zip(rows, samples):
        prompt_len = len(sample["prompt_token_ids"])
        assert row["input_ids"] == sample["prompt_token_ids"] + sample["token_ids"]
        assert row["loss_mask"] == [0] * prompt_len + [1] * len(sample["token_ids"])
    [drift] = [c for c in result.get_asset_check_evaluations() if c.check_name == "template_drift"]
    assert drift.metadata["drift_prompt_mismatch_rate"].value == 0.0  # the local turn contexts are the server's

    # hidden_states and the training folder tell a conversation's turns apart: each row reads its own file.
    [files_check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "files_match_rows"]
    assert files_check.passed
    joined, _ = _read_partition(Path(storage_root.root), PARTITION)
    assert joined.num_rows == 6 and len(set(joined["content_id"].to_pylist())) == 6
    for row in joined.to_pylist():
        assert load_sample(storage_root.path("hidden_states", PARTITION) / row["file"])["token_ids"].tolist() == \
            row["input_ids"]

    # Resume per turn: with only the turn-0 rows on disk, the next run asks the turn-1s alone.
    kept = [s for s in load_samples(folder).to_pylist() if s["turn"] == 0]
    for path in shard_paths(folder):
        path.unlink()
    with ShardWriter(folder) as writer:
        for row in kept:
            writer.add(row)
    _, meta = materialize()
    assert meta["captured_this_run"].value == 3
    again = load_samples(folder).to_pylist()
    assert [s for s in again if s["turn"] == 0] == kept and len(again) == 6
    assert sum(pq.read_metadata(p).num_rows for p in shard_paths(folder)) == 6  # nothing asked twice


@pytest.mark.integration
def test_tiny_kimi_turns_are_asked_in_the_context_its_own_template_renders(storage_root, tiny_kimi, kimi_server_urls):
    """Kimi-K2.5's template, not Qwen3's, decides what of an earlier answer stays in the next turn's
    context; the local render token_sequences relies on must still be the server's, token for token."""
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.token_sequences import asset as token_sequences
    from eagle_assets.tiny_verifier.embedded import embedded_resources
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import VLLMServer

    conversations = {p["prompt_id"]: p["messages"] for p in multi_turn_prompts(storage_root, 2)}
    parts = source_partitions()
    built = token_sequences.build(parts)
    result = dg.materialize(
        reasoning_samples.build(parts)["assets"] + built["assets"] + built["checks"], partition_key=PARTITION,
        resources={"storage": storage_root, "verifier": embedded_resources("tiny-kimi")["verifier"],
                   "vllm_server": VLLMServer(mode="external", base_urls=kimi_server_urls)},
        run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 256}}}},
        raise_on_error=False,
    )
    assert result.success
    samples = load_samples(storage_root.path("reasoning_samples", PARTITION)).to_pylist()
    wanted = [(pid, t) for pid in sorted(conversations) for t in range(len(user_turns(conversations[pid])))]
    assert [(s["prompt_id"], s["turn"]) for s in samples] == wanted and {s["status"] for s in samples} == {"ok"}
    tokenizer = AutoTokenizer.from_pretrained(tiny_kimi)
    by_key = {(s["prompt_id"], s["turn"]): s for s in samples}
    for pid, turn in wanted:
        answers = [Answer(by_key[pid, t]["content"], by_key[pid, t]["reasoning"]) for t in range(turn)]
        context = turn_context(conversations[pid], turn, answers)
        expected = tokenizer.apply_chat_template(context, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert by_key[pid, turn]["prompt_token_ids"] == list(expected)
    [drift] = [c for c in result.get_asset_check_evaluations() if c.check_name == "template_drift"]
    assert drift.metadata["drift_prompt_mismatch_rate"].value == 0.0
    rows = pq.read_table(storage_root.path("token_sequences", PARTITION) / "sequences.parquet").to_pylist()
    assert [(r["prompt_id"], r["turn"]) for r in rows] == wanted
    for row in rows:
        sample = by_key[row["prompt_id"], row["turn"]]
        assert row["input_ids"] == sample["prompt_token_ids"] + sample["token_ids"]


@pytest.mark.integration
def test_kill_9_mid_run_then_resume_asks_each_turn_once(storage_root, vllm_server_urls, tmp_path):
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import VLLMServer

    wanted = Counter((p["prompt_id"], t) for p in multi_turn_prompts(storage_root, 8)
                     for t in range(len(user_turns(p["messages"]))))
    folder = storage_root.path("reasoning_samples", PARTITION)
    kill_after_rows({"turns": "all", "max_tokens": 160, "concurrency": 1, "shard_rows": 1},
                    tmp_path, storage_root.root, vllm_server_urls[0], rows=3)
    before = load_samples(folder)
    assert 0 < before.num_rows < len(wanted), "the kill did not land mid-run"

    result = dg.materialize(
        reasoning_samples.build(source_partitions())["assets"], partition_key=PARTITION,
        resources={"storage": storage_root, "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls)},
        run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 160}}}},
    )
    [mat] = result.asset_materializations_for_node("reasoning_samples")
    assert mat.metadata["captured_this_run"].value == len(wanted) - before.num_rows
    # Every shard row, not just the latest view: each turn of each conversation has exactly one ok row.
    every_row = pa.concat_tables(pq.read_table(p, columns=["prompt_id", "turn", "status"]) for p in shard_paths(folder))
    assert Counter((pid, turn) for pid, turn, status in zip(*(every_row[c].to_pylist() for c in every_row.column_names))
                   if status == "ok") == wanted
