"""Acceptance per request, from vLLM's per-request speculative-decoding statistics, and what it shows that one
server-wide average cannot: τ per suite and category with a bootstrap confidence interval over prompts,
per-position acceptance, τ along the generated sequence, τ inside the thinking and in the answer, the worst
prompts.

Every number keeps vLLM's convention, τ = 1 + accepted / verify steps (a verify step is one draft: K proposed
tokens, the verifier's own token besides the accepted ones), summed over the requests a number covers: a
suite's τ weighs each step alike, as the server's counters do, so the two agree (their sums are the same
events; the cross-check is :func:`counter_agreement`).

Where a step sits in the output: the first output token comes from the prefill, then step ``i`` starts at
output position ``1 + sum(accepted_j + 1 for j < i)`` (detailed mode gives the accepted count of every step,
in order). A step counts in the position bin, and on the thinking or the answer side, where it starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from eagle_assets.reasoning_samples.quality import ThinkMarkers, thinking_span

# Output-position bins (token index in the generated sequence): [start, end); the last bin is open-ended.
POSITION_EDGES = (0, 512, 1024, 2048, 4096, 8192)
BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95
WORST_PROMPTS = 5
# The per-request τ and the counters' τ must agree this closely (relative); they count the same steps.
AGREEMENT = 0.01

REQUESTS_SCHEMA = pa.schema(
    [
        ("suite", pa.string()),  # the prompt set's label (metadata key prefix)
        ("suite_name", pa.string()),
        ("suite_version", pa.string()),
        ("category", pa.string()),
        ("prompt_id", pa.string()),
        ("turn", pa.int32()),  # -1: a single-turn request; k: turn k of a conversation
        ("variant", pa.string()),
        ("num_speculative_tokens", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("answer_start", pa.int32()),  # output index where the answer begins (after the end-of-thinking token)
        ("spec_steps", pa.int32()),
        ("draft_tokens", pa.int32()),
        ("accepted_tokens", pa.int32()),
        ("acceptance_histogram", pa.list_(pa.int32())),  # verify steps that accepted exactly j draft tokens
        ("per_step_accepted", pa.list_(pa.int16())),
        ("per_step_drafted", pa.list_(pa.int16())),
        ("tau", pa.float64()),
        ("latency_s", pa.float64()),
        ("server_tokens_per_s", pa.float64()),
    ]
)


def _kilo(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens >= 1024 else str(tokens)


def bin_label(start: int, end: int | None) -> str:
    """``0-512``, ``512-1K``, ``1K-2K`` … ``8K+``."""
    return f"{_kilo(start)}+" if end is None else f"{_kilo(start)}-{_kilo(end)}"


def bin_key(start: int, end: int | None) -> str:
    """The metadata key part of a bin: ``tokens_0_512``, ``tokens_512_1k``, ``tokens_8k_up``."""
    return f"tokens_{_kilo(start).lower()}_" + ("up" if end is None else _kilo(end).lower())


def answer_start(prompt_ids, token_ids, markers: ThinkMarkers | None) -> int | None:
    """Where the answer begins in ``token_ids``: after the end-of-thinking token (all of it when the thinking
    never ended), 0 when the output has no thinking; None when the markers or the tokens are unknown."""
    if markers is None or token_ids is None or prompt_ids is None:
        return None
    token_ids = list(token_ids)
    if thinking_span(prompt_ids, token_ids, markers).tokens is None:
        return 0
    return token_ids.index(markers.end) + 1 if markers.end in token_ids else len(token_ids)


def request_row(
    capture: dict,
    *,
    suite: str,
    suite_name: str,
    suite_version: str,
    category: str,
    num_speculative_tokens: int,
    markers: ThinkMarkers | None,
) -> dict:
    """One row of ``requests.parquet`` from a served capture row (its ``spec_decoding``, from the response)."""
    spec = capture.get("spec_decoding") or {}
    steps = spec.get("num_spec_steps")
    accepted = spec.get("num_accepted_draft_tokens")
    sampling = capture.get("sampling") or ""
    timing = capture.get("server_metrics") or {}
    return {
        "suite": suite,
        "suite_name": suite_name,
        "suite_version": suite_version,
        "category": category,
        "prompt_id": capture["prompt_id"],
        "turn": capture.get("turn", -1),
        "variant": _variant(sampling),
        "num_speculative_tokens": num_speculative_tokens,
        "status": capture["status"],
        "error": capture.get("error"),
        "finish_reason": capture.get("finish_reason"),
        "prompt_tokens": capture.get("prompt_tokens"),
        "completion_tokens": capture.get("completion_tokens"),
        "answer_start": answer_start(capture.get("prompt_token_ids"), capture.get("token_ids"), markers),
        "spec_steps": steps,
        "draft_tokens": spec.get("num_draft_tokens"),
        "accepted_tokens": accepted,
        "acceptance_histogram": spec.get("acceptance_histogram"),
        "per_step_accepted": spec.get("per_step_accepted"),
        "per_step_drafted": spec.get("per_step_drafted"),
        "tau": 1.0 + accepted / steps if steps else None,
        "latency_s": capture.get("latency_s"),
        "server_tokens_per_s": timing.get("tokens_per_second"),
    }


def _variant(sampling: str) -> str | None:
    import json

    try:
        return json.loads(sampling).get("variant") if sampling else None
    except (ValueError, AttributeError):
        return None


def requests_table(rows: Sequence[dict]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=REQUESTS_SCHEMA)


@dataclass
class Tally:
    """Verify steps and accepted draft tokens summed over some requests (or some of their steps)."""

    steps: int = 0
    accepted: int = 0

    def add(self, steps: int, accepted: int) -> None:
        self.steps += steps
        self.accepted += accepted

    @property
    def tau(self) -> float | None:
        return 1.0 + self.accepted / self.steps if self.steps else None


def measured(rows: Iterable[dict]) -> list[dict]:
    """The ok rows that carry per-request statistics."""
    return [r for r in rows if r["status"] == "ok" and r.get("spec_steps") is not None]


def tally(rows: Iterable[dict]) -> Tally:
    total = Tally()
    for r in measured(rows):
        total.add(r["spec_steps"], r["accepted_tokens"])
    return total


def per_position(rows: Iterable[dict], k: int) -> list[float]:
    """Acceptance at draft positions 1..K: the share of verify steps that accepted at least k draft tokens
    (the counters' ``accepted_at_pos[k-1] / drafts``), from each request's histogram."""
    hist = np.zeros(k + 1, dtype=np.int64)
    for r in measured(rows):
        counts = (r.get("acceptance_histogram") or [])[: k + 1]
        hist[: len(counts)] += counts
    steps = hist.sum()
    return [float(hist[j:].sum() / steps) if steps else 0.0 for j in range(1, k + 1)]


def step_starts(per_step_accepted: Sequence[int]) -> np.ndarray:
    """The output position each verify step starts at (the prefill's token is position 0)."""
    accepted = np.asarray(per_step_accepted, dtype=np.int64)
    return 1 + np.concatenate([[0], np.cumsum(accepted + 1)[:-1]]) if len(accepted) else accepted


def _detailed(rows: Iterable[dict]) -> list[dict]:
    return [r for r in measured(rows) if r.get("per_step_accepted") is not None]


@dataclass(frozen=True)
class PositionBin:
    start: int
    end: int | None  # None: open-ended
    tally: Tally

    @property
    def label(self) -> str:
        return bin_label(self.start, self.end)

    @property
    def key(self) -> str:
        return bin_key(self.start, self.end)


def position_bins(rows: Iterable[dict], edges: Sequence[int] = POSITION_EDGES) -> list[PositionBin]:
    """τ along the generated sequence: every verify step of the detailed rows in the bin of the output
    position it starts at. Together the bins hold every step (the last one is open-ended)."""
    bounds = [*edges[1:], None]
    bins = [PositionBin(start, end, Tally()) for start, end in zip(edges, bounds)]
    cuts = np.asarray(edges[1:], dtype=np.int64)
    for r in _detailed(rows):
        accepted = np.asarray(r["per_step_accepted"], dtype=np.int64)
        where = np.searchsorted(cuts, step_starts(accepted), side="right")
        for index in np.unique(where):
            chosen = where == index
            bins[int(index)].tally.add(int(chosen.sum()), int(accepted[chosen].sum()))
    return bins


def thinking_and_answer(rows: Iterable[dict]) -> tuple[Tally, Tally]:
    """(the steps that start inside the thinking, those in the answer), split at the end-of-thinking token,
    over the detailed rows whose split is known."""
    thinking, answer = Tally(), Tally()
    for r in _detailed(rows):
        if r.get("answer_start") is None:
            continue
        accepted = np.asarray(r["per_step_accepted"], dtype=np.int64)
        inside = step_starts(accepted) < r["answer_start"]
        thinking.add(int(inside.sum()), int(accepted[inside].sum()))
        answer.add(int((~inside).sum()), int(accepted[~inside].sum()))
    return thinking, answer


def _by_prompt(rows: Iterable[dict]) -> dict[str, Tally]:
    """One tally per prompt (a conversation's turns together: they share the prompt and its context)."""
    prompts: dict[str, Tally] = {}
    for r in measured(rows):
        prompts.setdefault(r["prompt_id"], Tally()).add(r["spec_steps"], r["accepted_tokens"])
    return prompts


def bootstrap_ci(
    rows: Iterable[dict], resamples: int = BOOTSTRAP_RESAMPLES, level: float = CI_LEVEL, seed: int = 0
) -> tuple[float, float] | None:
    """A percentile bootstrap interval of τ over prompts: prompts drawn with replacement, τ of each draw
    summed as the suite's τ is. Seeded, so the same rows give the same interval."""
    prompts = [t for t in _by_prompt(rows).values() if t.steps]
    if not prompts:
        return None
    steps = np.array([t.steps for t in prompts], dtype=np.float64)
    accepted = np.array([t.accepted for t in prompts], dtype=np.float64)
    draws = np.random.default_rng(seed).integers(0, len(prompts), size=(resamples, len(prompts)))
    taus = 1.0 + accepted[draws].sum(axis=1) / steps[draws].sum(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(taus, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class PromptTau:
    prompt_id: str
    category: str
    tau: float
    steps: int


def worst_prompts(rows: Sequence[dict], count: int = WORST_PROMPTS) -> list[PromptTau]:
    """The prompts with the lowest τ (the most steps first among equals): where the draft fails."""
    categories = {r["prompt_id"]: r["category"] for r in rows}
    ranked = sorted(
        (PromptTau(pid, categories[pid], t.tau, t.steps) for pid, t in _by_prompt(rows).items() if t.steps),
        key=lambda p: (p.tau, -p.steps, p.prompt_id),
    )
    return ranked[:count]


def counter_agreement(per_request: Tally, drafts: float, accepted: float) -> float | None:
    """The relative difference of the per-request τ and the counters' τ (None without both)."""
    if not per_request.steps or drafts <= 0:
        return None
    counter_tau = 1.0 + accepted / drafts
    return abs(per_request.tau - counter_tau) / counter_tau


@dataclass
class SuiteSummary:
    """What one prompt set's per-request rows say."""

    label: str
    k: int
    rows: list[dict]
    tally: Tally
    ci: tuple[float, float] | None
    per_position: list[float]
    bins: list[PositionBin]
    thinking: Tally
    answer: Tally
    categories: dict[str, tuple[int, Tally, tuple[float, float] | None]]  # category -> (prompts, tally, CI)
    worst: list[PromptTau]
    agreement: float | None  # relative difference to the counters' τ
    missing: int = 0  # ok requests the server sent no statistics for
    notes: list[str] = field(default_factory=list)

    def numbers(self) -> dict[str, float | int]:
        """Flat numbers, keys relative to the set's label."""
        if not self.tally.steps:
            return {"requests_with_metrics": 0, "requests_without_metrics": self.missing}
        out: dict[str, float | int] = {
            "tau_per_request": round(self.tally.tau, 4),
            "requests_with_metrics": len(measured(self.rows)),
            "requests_without_metrics": self.missing,
            "spec_steps": self.tally.steps,
        }
        if self.ci is not None:
            out["tau_ci_low"], out["tau_ci_high"] = round(self.ci[0], 4), round(self.ci[1], 4)
        if self.agreement is not None:
            out["tau_vs_counters"] = round(self.agreement, 6)
        for side, part in (("thinking", self.thinking), ("answer", self.answer)):
            if part.steps:
                out[f"tau_{side}"] = round(part.tau, 4)
                out[f"steps_{side}"] = part.steps
        for position in self.bins:
            if position.tally.steps:
                out[f"tau_{position.key}"] = round(position.tally.tau, 4)
                out[f"steps_{position.key}"] = position.tally.steps
        return out

    def detail(self) -> dict:
        """The report's record: categories, bins, worst prompts."""
        return {
            "categories": {
                name: {"prompts": prompts, "steps": t.steps, "tau": t.tau, "ci": list(ci) if ci else None}
                for name, (prompts, t, ci) in self.categories.items()
            },
            "per_position": self.per_position,
            "position_bins": [
                {"tokens": b.label, "start": b.start, "end": b.end, "steps": b.tally.steps, "tau": b.tally.tau}
                for b in self.bins
            ],
            "thinking": {"steps": self.thinking.steps, "tau": self.thinking.tau},
            "answer": {"steps": self.answer.steps, "tau": self.answer.tau},
            "worst_prompts": [vars(p) for p in self.worst],
        }

    @property
    def seen_bins(self) -> list[PositionBin]:
        return [b for b in self.bins if b.tally.steps]


def summarize(label: str, rows: Sequence[dict], k: int, drafts: float, accepted: float) -> SuiteSummary:
    """The per-request numbers of one prompt set's rows, with the counters' drafts and accepted tokens of
    the same requests for the cross-check."""
    ok = [r for r in rows if r["status"] == "ok"]
    total = tally(rows)
    categories = {}
    for name in sorted({r["category"] for r in measured(rows)}):
        mine = [r for r in rows if r["category"] == name]
        categories[name] = (len(_by_prompt(mine)), tally(mine), bootstrap_ci(mine))
    thinking, answer = thinking_and_answer(rows)
    return SuiteSummary(
        label=label,
        k=k,
        rows=list(rows),
        tally=total,
        ci=bootstrap_ci(rows),
        per_position=per_position(rows, k),
        bins=position_bins(rows),
        thinking=thinking,
        answer=answer,
        categories=categories,
        worst=worst_prompts(rows),
        agreement=counter_agreement(total, drafts, accepted),
        missing=len(ok) - len(measured(rows)),
    )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return "—" if ci is None else f"{ci[0]:.3f}-{ci[1]:.3f}"


def summary_table(summary: SuiteSummary, counter_tau: float | None) -> str:
    """A Markdown table of one prompt set: τ per category with its 95% CI, per position, along the output,
    thinking vs answer, the worst prompts, and the counters' τ beside the per-request one."""
    s = summary
    lines = [
        f"**{s.label}**: τ {_fmt(s.tally.tau)} (95% CI {_ci(s.ci)}) over {s.tally.steps} verify steps; "
        f"counters τ {_fmt(counter_tau)}; thinking τ {_fmt(s.thinking.tau)}, answer τ {_fmt(s.answer.tau)}",
        "",
        "| category | prompts | steps | τ | 95% CI |",
        "|---|---|---|---|---|",
        f"| all | {len(_by_prompt(s.rows))} | {s.tally.steps} | {_fmt(s.tally.tau)} | {_ci(s.ci)} |",
        *(
            f"| {name} | {prompts} | {t.steps} | {_fmt(t.tau)} | {_ci(ci)} |"
            for name, (prompts, t, ci) in s.categories.items()
        ),
        "",
        "| output tokens | steps | τ |",
        "|---|---|---|",
        *(f"| {b.label} | {b.tally.steps} | {_fmt(b.tally.tau)} |" for b in s.bins),
        "",
        "per position 1..K: " + " / ".join(f"{p:.3f}" for p in s.per_position),
    ]
    if s.worst:
        lines += ["", "worst prompts: " + ", ".join(f"{p.prompt_id} τ {p.tau:.3f} ({p.steps} steps)" for p in s.worst)]
    if s.missing:
        lines += ["", f"{s.missing} requests came back without per-request statistics"]
    return "\n".join(lines)
