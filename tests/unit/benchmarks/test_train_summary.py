"""train_gpu.py's summary: the two probe variants side by side give the graph-break ratio."""

from __future__ import annotations

from benchmarks.train_summary import Tally, summary_lines
from benchmarks.train_variants import GPU_BOUND_NO_BREAK, PROBE_VARIANTS


def test_the_probe_with_and_without_the_forced_break_give_their_ratio():
    names = ["gpu-bound", GPU_BOUND_NO_BREAK]
    assert set(names) == set(PROBE_VARIANTS)
    tally = Tally(names)
    tally.rates = {"gpu-bound": [100.0, 100.0, 100.0], GPU_BOUND_NO_BREAK: [110.0, 120.0, 90.0]}
    tally.startups = {name: [10.0, 10.0, 10.0] for name in names}
    lines = summary_lines(names, tally, "fused")
    (ratio,) = [line for line in lines if line.startswith("no_break_step_ratio=")]
    assert ratio.startswith("no_break_step_ratio=1.100 ") and ratio.endswith("per repeat 1.100 1.200 0.900)")
    assert "gpu_bound_no_break_tokens_per_s=110" in lines


def test_one_probe_variant_alone_gives_no_ratio():
    tally = Tally(["gpu-bound"])
    tally.rates, tally.startups = {"gpu-bound": [100.0]}, {"gpu-bound": [10.0]}
    assert not [line for line in summary_lines(["gpu-bound"], tally, "fused") if "no_break" in line]
