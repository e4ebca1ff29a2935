"""train_gpu.py --warm-compile: the variants' first epochs run at once and each is stopped, with its children,
once its second epoch starts; one that dies early is reported with its last lines."""

from __future__ import annotations

import os
import sys
import time

from benchmarks.train_warmup import first_run_bounds, warm_compile

TRAINER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
print("Training epoch 1/3 started", flush=True)
time.sleep(0.5)
print("Training epoch 1/3 completed", flush=True)
print("Training epoch 2/3 started", flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split()[2] != "Z"


def test_each_variant_stops_after_its_first_epoch_with_its_children(tmp_path):
    commands = {
        "ours": lambda save: [sys.executable, "-c", TRAINER, str(tmp_path / "child.pid")],
        "speculators": lambda save: [sys.executable, "-c", "print('CUDA out of memory'); raise SystemExit(3)"],
        "gpu-bound": lambda save: [sys.executable, "-c", "raise SystemExit('the probe is never warmed')"],
    }
    started = time.perf_counter()
    warm_ups = warm_compile(commands, ["ours", "speculators", "gpu-bound"], tmp_path, limit_s=60)
    assert time.perf_counter() - started < 30
    lines = [warm.line for warm in warm_ups]
    assert sorted(line.split(":")[0] for line in lines) == ["warm-up ours", "warm-up speculators"]
    (ours,) = [line for line in lines if line.startswith("warm-up ours")]
    assert "compiled in" in ours
    bound_s = {warm.name: warm.bound_s for warm in warm_ups}
    assert 0 < bound_s["ours"] < 30 and bound_s["speculators"] is None  # what bounds a first timed run
    # The probe, never warmed up, compiles what ours does: ours' bound is its own.
    assert first_run_bounds(warm_ups, ["ours", "speculators", "gpu-bound"]) == {
        "ours": bound_s["ours"],
        "gpu-bound": bound_s["ours"],
    }
    (theirs,) = [line for line in lines if line.startswith("warm-up speculators")]
    assert "exited 3" in theirs and "CUDA out of memory" in theirs
    assert not (tmp_path / "warm-ours").exists()  # nothing of a warm-up is kept
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def test_a_variant_still_compiling_at_the_limit_is_stopped(tmp_path):
    slow = {"ours": lambda save: [sys.executable, "-c", "import time; time.sleep(600)"]}
    (warm,) = warm_compile(slow, ["ours"], tmp_path, limit_s=2)
    # Its first timed run would compile at least as long: the limit bounds it, and the probes with it.
    assert "stopped at the 2s limit" in warm.line and 2 <= warm.bound_s < 10
    assert first_run_bounds([warm], ["ours", "gpu-bound"]) == {"ours": warm.bound_s, "gpu-bound": warm.bound_s}


def test_a_job_killed_during_the_warm_up_leaves_no_trainer(tmp_path):
    import subprocess
    from pathlib import Path

    pid_file = tmp_path / "trainer.pid"
    trainer = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    job = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from benchmarks.train_warmup import first_run_bounds, warm_compile
warm_compile({{"ours": lambda save: [sys.executable, "-c", {trainer!r}]}}, ["ours"], Path({str(tmp_path)!r}), 600)
"""
    process = subprocess.Popen([sys.executable, "-c", job])
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    process.kill()
    process.wait()
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
