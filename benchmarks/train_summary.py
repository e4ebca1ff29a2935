"""What ``benchmarks/train_gpu.py`` keeps of its runs and prints at the end: per-variant medians and
spreads, the ratios against ours, and the ``result ...`` headline line."""

from __future__ import annotations

import statistics

from benchmarks.spread import spread
from benchmarks.train_variants import GPU_BOUND_NO_BREAK


class Tally:
    """Every variant's rates so far, and the printed line of each run (failed runs apart)."""

    def __init__(self, names: list[str]):
        self.rates: dict[str, list[float]] = {name: [] for name in names}
        self.startups: dict[str, list[float]] = {name: [] for name in names}
        # The same tokens over the whole span from epoch 2's start to the last epoch's end, the checkpoint saves
        # and validations between epochs included: no work can hide between timed epochs.
        self.span_rates: dict[str, list[float]] = {name: [] for name in names}
        self.lines: list[str] = []
        self.failures: list[str] = []

    def replay(self, record: dict) -> None:
        """A run read back from ``--runs-file``."""
        if record.get("failed"):
            self.failures.append(record["line"] + " (from --runs-file)")
            return
        name = record["name"]
        self.rates[name].append(record["tokens_per_s"])
        self.startups[name].append(record["startup_s"])
        if "span_tokens_per_s" in record:
            self.span_rates[name].append(record["span_tokens_per_s"])
        self.lines.append(record["line"] + " (from --runs-file)")


def report_missing(names: list[str], tally: Tally, once: list[str], repeats: int, time_budget_s) -> None:
    """Says so when the time budget left runs undone (failed variants are not counted as missing)."""
    rates = tally.rates
    expected = {name: 1 if name in once else repeats for name in names}
    failed = {name for name in names if any(f" {name}: FAILED" in line for line in tally.failures)}
    if any(len(rates[name]) < expected[name] for name in set(names) - failed):
        print(
            f"time budget {time_budget_s}s reached: runs done "
            f"{ {name: len(rates[name]) for name in names} } of {expected}",
            flush=True,
        )


def variant_lines(name: str, tally: Tally) -> list[str]:
    rates, span_rates = tally.rates[name], tally.span_rates[name]
    lines = [
        f"{name}: tokens/s median {statistics.median(rates):.0f} (runs "
        f"{' '.join(f'{r:.0f}' for r in rates)}; spread {spread(rates):.1%}); "
        f"start-up median {statistics.median(tally.startups[name]):.1f}s",
        f"{name.replace('-', '_')}_tokens_per_s={statistics.median(rates):.0f}",
    ]
    if span_rates:
        lines.append(
            f"{name}: span tokens/s median {statistics.median(span_rates):.0f} (runs "
            f"{' '.join(f'{r:.0f}' for r in span_rates)}; saves and validations between "
            f"timed epochs included)"
        )
    return lines


def ratio_lines(name: str, tally: Tally, settings_loss: str) -> list[str]:
    """``name`` against ours: the gpu-bound fraction, the fp8 ratio, or a throughput ratio (and its span twin)."""
    med = statistics.median
    rates, span_rates = tally.rates, tally.span_rates
    if name == "gpu-bound":
        return [
            f"gpu_bound_fraction={med(rates['ours']) / med(rates[name]):.3f} "
            f"(ours' median over the resident-batch step rate, {settings_loss} loss)"
        ]
    if name == "ours-fp8":
        paired = [a / b for a, b in zip(rates[name], rates["ours"])]
        return [
            f"fp8_train_throughput_ratio={med(rates[name]) / med(rates['ours']):.3f} "
            f"(per repeat {' '.join(f'{r:.3f}' for r in paired)})"
        ]
    key = "train_throughput_ratio" if name == "speculators" else f"train_throughput_ratio_vs_{name}"
    paired = [a / b for a, b in zip(rates["ours"], rates[name])]
    lines = [f"{key}={med(rates['ours']) / med(rates[name]):.3f} (per repeat {' '.join(f'{r:.3f}' for r in paired)})"]
    if span_rates["ours"] and span_rates[name]:
        lines.append(f"{key}_span={med(span_rates['ours']) / med(span_rates[name]):.3f}")
    return lines


def summary_lines(names: list[str], tally: Tally, settings_loss: str) -> list[str]:
    """Failures first, then each variant's medians, then every variant against ours."""
    summary = [*tally.failures]
    for name in names:
        summary.extend(variant_lines(name, tally))
    for name in names:
        if name != "ours" and tally.rates.get("ours"):
            summary.extend(ratio_lines(name, tally, settings_loss))
    with_break, without = tally.rates.get("gpu-bound"), tally.rates.get(GPU_BOUND_NO_BREAK)
    if with_break and without:
        paired = [a / b for a, b in zip(without, with_break)]
        summary.append(
            f"no_break_step_ratio={statistics.median(without) / statistics.median(with_break):.3f} "
            f"(resident-step rate without speculators' forced graph break over with it; per repeat "
            f"{' '.join(f'{r:.3f}' for r in paired)})"
        )
    return summary


def result_line(args, total_seq_len, draft_vocab, rates, span_rates, flops_per_token, peak) -> str:
    """The headline: span ratio first (nothing can hide between timed epochs), the timed-epoch ratio
    beside it, ours against the GPU-bound step rate, and ours' MFU over the measured peak."""
    med = statistics.median
    fields = [
        f"result shape={args.shape}",
        f"row_tokens={args.seq_len[0]}-{args.seq_len[1]}",
        f"total_seq_len={total_seq_len}",
        f"draft_vocab={draft_vocab}",
    ]
    ours, ours_span = rates.get("ours"), span_rates.get("ours")
    if ours and span_rates.get("speculators"):
        fields.append(f"train_throughput_ratio_span={med(ours_span) / med(span_rates['speculators']):.3f}")
    if ours and rates.get("speculators"):
        fields.append(f"train_throughput_ratio={med(ours) / med(rates['speculators']):.3f}")
    if ours and rates.get("gpu-bound"):
        fields.append(f"gpu_bound_fraction={med(ours) / med(rates['gpu-bound']):.3f}")
        fields.append(f"gpu_bound_fraction_span={med(ours_span) / med(rates['gpu-bound']):.3f}")
        fields.append(f"gpu_bound_mfu={med(rates['gpu-bound']) * flops_per_token / peak:.3f}")
    if ours:
        fields.append(f"mfu={med(ours) * flops_per_token / peak:.3f}")
        fields.append(f"mfu_span={med(ours_span) * flops_per_token / peak:.3f}")
    fields.append(f"peak_tflops={peak / 1e12:.1f}")
    return " ".join(fields)
