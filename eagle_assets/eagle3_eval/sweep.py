"""K chosen, not assumed: the same prompts served with ``num_speculative_tokens`` = each K of a list, and once
without the draft, on this host; τ and tokens/s per K and the K that decodes fastest.

A larger K proposes more tokens per step (τ can only grow with it) but every step drafts and verifies them all,
so the fastest K depends on the draft, the verifier and the host: it is measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eagle_assets.eagle3_eval.per_request import tally
from eagle_assets.eagle3_eval.served import ServedRun


@dataclass(frozen=True)
class SweepPoint:
    k: int
    tau: float  # per request where the server sent statistics, else the counters'
    tokens_per_s: float
    requests: int


@dataclass(frozen=True)
class Sweep:
    points: list[SweepPoint]
    tokens_per_s_without_draft: float
    prompts: int

    @property
    def best(self) -> SweepPoint:
        """The K that decodes fastest here (the smaller K among equals: fewer proposals wasted)."""
        return max(self.points, key=lambda p: (p.tokens_per_s, -p.k))

    def speedup(self, point: SweepPoint) -> float | None:
        return point.tokens_per_s / self.tokens_per_s_without_draft if self.tokens_per_s_without_draft > 0 else None

    def numbers(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            "sweep/best_num_speculative_tokens": self.best.k,
            "sweep/prompts": self.prompts,
            "sweep/tokens_per_s_without_draft": round(self.tokens_per_s_without_draft, 2),
        }
        for p in self.points:
            out[f"sweep/k{p.k}/acceptance_length"] = round(p.tau, 4)
            out[f"sweep/k{p.k}/tokens_per_s"] = round(p.tokens_per_s, 2)
            speedup = self.speedup(p)
            if speedup is not None:
                out[f"sweep/k{p.k}/speedup"] = round(speedup, 4)
        return out

    def table(self) -> str:
        lines = [
            f"Same {self.prompts} prompts per K; without the draft {self.tokens_per_s_without_draft:.1f} tokens/s; "
            f"best here: K={self.best.k}",
            "",
            "| K | τ | tokens/s with the draft | speedup |",
            "|---|---|---|---|",
        ]
        for p in self.points:
            speedup = self.speedup(p)
            mark = " (best)" if p.k == self.best.k else ""
            lines.append(
                f"| {p.k}{mark} | {p.tau:.3f} | {p.tokens_per_s:.1f} | {'—' if speedup is None else f'{speedup:.3f}'} |"
            )
        return "\n".join(lines)


def served_tau(run: ServedRun) -> float:
    """τ of a run: per request when every ok row carries statistics, else the counters'."""
    rows = [
        {"status": r["status"], "prompt_id": r["prompt_id"], **_spec_counts(r.get("spec_decoding"))}
        for r in run.ok_rows
    ]
    measured = tally(rows)
    if measured.steps and all(r["spec_steps"] is not None for r in rows):
        return measured.tau
    return run.counters.acceptance_length


def _spec_counts(spec: dict | None) -> dict:
    spec = spec or {}
    return {"spec_steps": spec.get("num_spec_steps"), "accepted_tokens": spec.get("num_accepted_draft_tokens")}


def sweep_num_speculative_tokens(
    ks: Sequence[int], measure: Callable[[int | None], ServedRun], prompts: int, log: Callable[[str], None]
) -> Sweep:
    """``measure(k)`` serves the sweep's prompts with K = ``k`` (None: without the draft) and returns the run."""
    points = []
    for k in sorted(set(ks)):
        run = measure(k)
        point = SweepPoint(k, served_tau(run), run.tokens_per_s, len(run.ok_rows))
        log(f"sweep K={k}: τ {point.tau:.3f}, {point.tokens_per_s:.1f} tokens/s")
        points.append(point)
    without = measure(None)
    log(f"sweep without the draft: {without.tokens_per_s:.1f} tokens/s")
    return Sweep(points, without.tokens_per_s, prompts)
