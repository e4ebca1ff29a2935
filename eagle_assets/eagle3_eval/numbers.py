"""What one evaluation measured, as numbers: :class:`Evaluation` (the served runs of every prompt set, the
simulated value, the baseline and the sweep) flattened into metadata keys, one key prefix per prompt set, and
the readers of those keys (τ per set, the acceptance table). The asset, the benchmark's table and
``eagle-assets checkpoints`` read the same keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from eagle_assets.eagle3_checkpoint.simulated import SimulatedAcceptance
from eagle_assets.eagle3_eval.served import ServedRun
from eagle_assets.eagle3_eval.sweep import Sweep


@dataclass
class Evaluation:
    """What :func:`~eagle_assets.eagle3_eval.evaluate.evaluate` measured: one served run per prompt set."""

    served: ServedRun
    simulated: SimulatedAcceptance | None
    baseline: ServedRun | None  # the same requests without the draft (tokens/s only)
    num_speculative_tokens: int
    ood: ServedRun | None = None  # the out-of-distribution set, served by the same speculating server
    by_variant: dict[str, ServedRun] = field(default_factory=dict)  # the in-distribution set per sampling variant
    suites: dict[str, ServedRun] = field(default_factory=dict)  # registered suites by label, same server
    sweep: Sweep | None = None

    def metadata(self) -> dict[str, float | int | str]:
        """Flat numbers for Dagster metadata, reports and the benchmark table; ``ood_*`` for the
        out-of-distribution set."""
        meta: dict[str, float | int | str] = {
            **_served_numbers(self.served),
            "num_speculative_tokens": self.num_speculative_tokens,
            "tokens_per_s_with_draft": round(self.served.tokens_per_s, 2),
            "acceptance_convention": "tau = 1 + accepted/drafts (vLLM: the verifier's own token counts)",
        }
        if self.ood is not None:
            meta.update(_served_numbers(self.ood, prefix="ood_"))
        for name, served in self.by_variant.items():
            meta.update(_served_numbers(served, prefix=f"variant[{name}]/"))
        for label, served in self.suites.items():
            meta.update(_served_numbers(served, prefix=f"{label}/"))
        if self.sweep is not None:
            meta.update(self.sweep.numbers())
        if self.simulated is not None:
            meta["simulated_acceptance_length"] = round(self.simulated.acceptance_length, 4)
            for k, rate in enumerate(self.simulated.acceptance_per_position):
                meta[f"simulated_acceptance_pos_{k + 1}"] = round(rate, 4)
            meta["simulated_drafts"] = self.simulated.drafts
        if self.baseline is not None:
            meta["tokens_per_s_without_draft"] = round(self.baseline.tokens_per_s, 2)
            if self.baseline.tokens_per_s > 0:
                meta["speedup"] = round(self.served.tokens_per_s / self.baseline.tokens_per_s, 4)
        return meta

    def metadata_by_set(self, label: str, ood_label: str) -> dict[str, float | int | str]:
        """:meth:`metadata` with each prompt set's numbers under its own key prefix (``<label>/acceptance_length``,
        ``<ood_label>/acceptance_length``), so a plot of one key never joins numbers of different prompt sets."""
        by_set: dict[str, float | int | str] = {}
        own = tuple(f"{label}/" for label in self.suites) + ("sweep/",)
        for key, value in self.metadata().items():
            if key in SHARED_KEYS or key.startswith(own):
                by_set[key] = value
            elif key.startswith("ood_"):
                by_set[f"{ood_label}/{key.removeprefix('ood_')}"] = value
            else:
                by_set[f"{label}/{key}"] = value
        return by_set


# Numbers of the whole evaluation, not of one prompt set.
SHARED_KEYS = ("num_speculative_tokens", "acceptance_convention")


def tau_by_set(metadata: dict) -> dict[str, float]:
    """vLLM-measured τ per prompt set from :meth:`Evaluation.metadata_by_set`'s keys (or a report of them):
    ``<set>/acceptance_length``, not a set's per-variant ``<set>/variant[<name>]/acceptance_length``."""
    return {
        key.removesuffix("/acceptance_length"): getattr(value, "value", value)
        for key, value in metadata.items()
        if key.endswith("/acceptance_length") and key.count("/") == 1
    }


def acceptance_table(metadata: dict, labels: Sequence[str]) -> str:
    """A Markdown table of the prompt sets in ``labels``: prompts, τ from the counters, per-position acceptance,
    simulated τ, τ from the per-request statistics with its bootstrap interval."""

    def get(label: str, key: str):
        value = metadata.get(f"{label}/{key}")
        return getattr(value, "value", value)

    k = int(getattr(metadata["num_speculative_tokens"], "value", metadata["num_speculative_tokens"]))
    lines = [
        "| prompt set | prompts | τ (vLLM) | per position | simulated τ | τ per request (95% CI) |",
        "|---|---|---|---|---|---|",
    ]
    for label in labels:
        positions = " / ".join(f"{get(label, f'acceptance_pos_{i}'):.3f}" for i in range(1, k + 1))
        simulated = get(label, "simulated_acceptance_length")
        per_request, low, high = (get(label, key) for key in ("tau_per_request", "tau_ci_low", "tau_ci_high"))
        measured = "—" if per_request is None else f"{per_request:.3f}"
        if low is not None:
            measured += f" ({low:.3f}-{high:.3f})"
        lines.append(
            f"| {label} | {get(label, 'prompts_evaluated')} | {get(label, 'acceptance_length'):.3f} | "
            f"{positions} | {'—' if simulated is None else f'{simulated:.3f}'} | {measured} |"
        )
    return "\n".join(lines)


def _served_numbers(served: ServedRun, prefix: str = "") -> dict[str, float | int]:
    counters = served.counters
    return {
        f"{prefix}acceptance_length": round(counters.acceptance_length, 4),
        **{f"{prefix}acceptance_pos_{k + 1}": round(r, 4) for k, r in enumerate(counters.acceptance_per_position)},
        f"{prefix}drafts": int(counters.drafts),
        f"{prefix}accepted_tokens": int(counters.accepted),
        f"{prefix}prompts_evaluated": len(served.ok_rows),
        f"{prefix}prompt_errors": len(served.rows) - len(served.ok_rows),
        f"{prefix}completion_tokens": served.completion_tokens,
    }
