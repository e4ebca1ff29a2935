"""What one prompt set's per-request rows say, as numbers for the metadata and a Markdown table for the UI."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from eagle_assets.eagle3_eval.per_request import (
    PositionBin,
    PromptTau,
    Tally,
    bootstrap_ci,
    by_prompt,
    counter_agreement,
    measured,
    per_position,
    position_bins,
    tally,
    thinking_and_answer,
    worst_prompts,
)


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
        categories[name] = (len(by_prompt(mine)), tally(mine), bootstrap_ci(mine))
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
        f"| all | {len(by_prompt(s.rows))} | {s.tally.steps} | {_fmt(s.tally.tau)} | {_ci(s.ci)} |",
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
