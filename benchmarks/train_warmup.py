"""``train_gpu.py --warm-compile``: every training variant's first epoch at once, in parallel processes, before
the timed runs, so that their cold torch.compile work (minutes a side on a fresh machine) overlaps instead of
landing in the first run of each side one after another. The processes are stopped once their first
validation is over; what they leave is the inductor cache every later run reads. Nothing of them is timed or
kept: the timed runs start after them, each its own process as always, and report their own (now warm)
epoch-1 compile and start-up apart from the timed epochs, as before. A variant that fails here (out of memory
beside the others on a small GPU, say) is reported, and its first timed run compiles cold as it would have.

Needs the repository root on ``sys.path`` (the entry scripts put it there).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from benchmarks.train_runs import EPOCH_LINE
from benchmarks.train_variants import PROBE_VARIANTS
from eagle_assets.core.child_process import die_with_parent
from eagle_assets.eagle3_checkpoint.trainer import process_env


class WarmUp(NamedTuple):
    """How one variant's warm-up ended: its printed line, and the seconds a first timed run takes at least, until
    one has run: its compilation's, or the limit that stopped it still compiling (``None``: it exited first)."""

    name: str
    line: str
    bound_s: float | None


def first_run_bounds(warm_ups: list[WarmUp], names: list[str]) -> dict[str, float]:
    """Each variant's :attr:`WarmUp.bound_s`; the probes, never warmed up, take ``ours``' (they compile what it
    does)."""
    bounds = {warm.name: warm.bound_s for warm in warm_ups if warm.bound_s is not None}
    if "ours" in bounds:
        bounds.update({name: bounds["ours"] for name in names if name in PROBE_VARIANTS})
    return bounds


def _compiled(log: Path) -> bool:
    """Whether a process's log shows its second epoch started: epoch 1 and its validation are compiled."""
    return any(
        (m := EPOCH_LINE.search(line)) and int(m.group(1)) >= 2 for line in log.read_text(errors="replace").splitlines()
    )


def warm_compile(
    commands: dict[str, Callable[[Path], list[str]]], names: list[str], work: Path, limit_s: float
) -> list[WarmUp]:
    """Run the first epoch of every variant in ``names`` but the probes (which compile what ``ours`` does) in
    parallel, each in ``work/warm-<name>``; returns how each ended: how long until its compilation was done,
    or why not. Stops any still running after ``limit_s``."""
    started = time.perf_counter()
    running: dict[str, tuple[subprocess.Popen, Path]] = {}
    for name in [name for name in names if name not in PROBE_VARIANTS]:
        command = commands[name]
        save = work / f"warm-{name}"
        save.mkdir(parents=True)
        log = save / "log.txt"
        with log.open("w") as out:
            # A session of its own, so that the trainer and its loader workers are stopped together; and the
            # trainer ends with this process, so a job killed mid-warm-up leaves nothing on the GPU.
            proc = subprocess.Popen(
                command(save),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=save,
                env=process_env(),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        running[name] = (proc, log)
    ended_warm_ups = []
    while running:
        time.sleep(1.0)
        elapsed = time.perf_counter() - started
        for name, (proc, log) in list(running.items()):
            ended, compiled = proc.poll() is not None, _compiled(log)
            if not (ended or compiled or elapsed > limit_s):
                continue
            if compiled:
                outcome = f"compiled in {elapsed:.0f}s"
            elif ended:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                outcome = f"exited {proc.returncode} after {elapsed:.0f}s before compiling: {' | '.join(tail)}"
            else:
                outcome = f"stopped at the {limit_s:.0f}s limit, still compiling"
            if not ended:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            bound = elapsed if compiled or not ended else None
            ended_warm_ups.append(WarmUp(name, f"warm-up {name}: {outcome}", bound))
            print(ended_warm_ups[-1].line, flush=True)
            shutil.rmtree(log.parent, ignore_errors=True)  # its epoch-1 checkpoint of an 8B-shaped draft is GBs
            del running[name]
    return ended_warm_ups
