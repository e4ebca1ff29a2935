"""The GPU-bound probe's profiles (``benchmarks/train_step_probe.py`` ``--profile-resident`` and
``--profile-steps``): kernel time by op, the device's busy share, host syncs, and torch.compile's counters."""

from __future__ import annotations

import os
import time
from pathlib import Path


def compile_counters() -> dict:
    """torch.compile's graph count, graph breaks and recompiles so far in this process."""
    from torch._dynamo.utils import counters

    return {
        "unique_graphs": counters["stats"].get("unique_graphs", 0),
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": sum(counters["recompiles"].values()),
    }


def device_time_us(prof) -> tuple[float, float]:
    """(kernel time summed, the union of kernel intervals) in microseconds: overlapping streams count once in the
    union, and the wall time outside it is the device's idle gaps."""
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    busy = sum(e.time_range.elapsed_us() for e in kernels)
    covered, end = 0.0, float("-inf")
    for start, stop in sorted((e.time_range.start, e.time_range.end) for e in kernels):
        covered += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return busy, covered


def profile_resident_steps(trainer, resident, steps: int, shape: str) -> None:
    """Kernel time by op over ``steps`` steps of ``resident`` (a loader of batches already on the GPU), the
    device's busy share, compile counters."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    before = compile_counters()
    trainer.train_loader = resident
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        trainer.train_epoch(0)
        torch.cuda.synchronize()
        wall = time.perf_counter() - started
    averages = prof.key_averages()
    busy, covered = device_time_us(prof)
    after = compile_counters()
    lines = [
        f"probe profile resident shape={shape}: {steps} steps, wall {wall * 1000 / steps:.1f} ms/step, kernels "
        f"{busy / 1000 / steps:.1f} ms/step, device busy {covered / 1e6 / wall:.1%} (idle gaps "
        f"{1 - covered / 1e6 / wall:.1%}), compile counters {after} ({after['recompiles'] - before['recompiles']} "
        "recompiles while profiling)",
        averages.table(sort_by="self_device_time_total", row_limit=30),
    ]
    print("\n".join(lines), flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"profile_{shape}.txt").write_text("\n".join(lines) + "\n")


def profile_real_steps(trainer, loader, steps: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    trainer.train_loader = loader
    wait, warmup = 2, 2
    # TrainerConfig is a NamedTuple: the step bound goes in through a copy.
    trainer.config = trainer.config._replace(max_steps=trainer.global_step + wait + warmup + steps)
    marks: list[float] = []

    def step_done():  # never waits for the device: the probe must not add syncs of its own
        marks.append(time.perf_counter())
        prof.step()

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=wait, warmup=warmup, active=steps),
    ) as prof:
        trainer.train_epoch(1, step_callback=step_done)
    torch.cuda.synchronize()
    trainer.config = trainer.config._replace(max_steps=None)
    averages = prof.key_averages()
    wall = marks[-1] - marks[wait + warmup - 1] if len(marks) > wait + warmup else float("nan")
    device_us, covered = device_time_us(prof)
    syncs = {
        e.key: (e.count, e.cpu_time_total)
        for e in averages
        if e.key
        in (
            "cudaStreamSynchronize",
            "cudaDeviceSynchronize",
            "cudaEventSynchronize",
            "cudaMemcpyAsync",
            "aten::item",
            "aten::_local_scalar_dense",
        )
    }
    print(
        f"probe profile: {steps} real steps, wall {wall * 1000 / steps:.1f} ms/step, device kernels "
        f"{device_us / 1000 / steps:.1f} ms/step, device busy {covered / 1e6 / wall:.1%}",
        flush=True,
    )
    for key, (count, cpu_us) in sorted(syncs.items()):
        print(
            f"probe profile: {key}: {count / steps:.2f} calls/step, {cpu_us / 1000 / steps:.2f} ms/step host",
            flush=True,
        )
    print(averages.table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
