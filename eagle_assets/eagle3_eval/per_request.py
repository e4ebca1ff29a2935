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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# Output-position bins (token index in the generated sequence): [start, end); the last bin is open-ended.
POSITION_EDGES = (0, 512, 1024, 2048, 4096, 8192)
BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95
WORST_PROMPTS = 5
# The per-request τ and the counters' τ must agree this closely (relative); they count the same steps.
AGREEMENT = 0.01


def _kilo(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens >= 1024 else str(tokens)


def bin_label(start: int, end: int | None) -> str:
    """``0-512``, ``512-1K``, ``1K-2K`` … ``8K+``."""
    return f"{_kilo(start)}+" if end is None else f"{_kilo(start)}-{_kilo(end)}"


def bin_key(start: int, end: int | None) -> str:
    """The metadata key part of a bin: ``tokens_0_512``, ``tokens_512_1k``, ``tokens_8k_up``."""
    return f"tokens_{_kilo(start).lower()}_" + ("up" if end is None else _kilo(end).lower())


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


def by_prompt(rows: Iterable[dict]) -> dict[str, Tally]:
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
    prompts = [t for t in by_prompt(rows).values() if t.steps]
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
        (PromptTau(pid, categories[pid], t.tau, t.steps) for pid, t in by_prompt(rows).items() if t.steps),
        key=lambda p: (p.tau, -p.steps, p.prompt_id),
    )
    return ranked[:count]


def counter_agreement(per_request: Tally, drafts: float, accepted: float) -> float | None:
    """The relative difference of the per-request τ and the counters' τ (None without both)."""
    if not per_request.steps or drafts <= 0:
        return None
    counter_tau = 1.0 + accepted / drafts
    return abs(per_request.tau - counter_tau) / counter_tau
