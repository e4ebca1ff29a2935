"""benchmarks/newton_schulz.py runs end to end at a CPU size and prints its result line."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PER_MATRIX = r"= (?P<difference>\S+); against float64: torch (?P<torch>\S+), ours (?P<ours>\S+)$"


def test_the_benchmark_times_both_iterations_and_finds_them_equal():
    argv = ["--shape", "tiny", "--device", "cpu", "--steps", "1", "--repeats", "2", "--block-rows", "32"]
    script = ROOT / "benchmarks" / "newton_schulz.py"
    out = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert "matrices=fc:128x384,q_proj:128x256" in lines[0]
    assert sum(line.startswith("repeat ") for line in lines) == 2
    compared = [re.search(PER_MATRIX, line) for line in lines if "max |ours - torch|" in line]
    assert len(compared) == 8 and all(compared)
    differences = [float(match["difference"]) for match in compared]
    assert max(differences) < 1e-2
    # Both bf16 iterations land about as far from the float64 one.
    for match in compared:
        assert float(match["ours"]) <= 1.05 * float(match["torch"]) + 1e-4
    [result] = [line for line in lines if line.startswith("result ")]
    assert "shape=tiny" in result and "block_rows=32" in result and "ns_speedup=" in result
