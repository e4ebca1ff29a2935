"""How long the training process's loader holds the GIL per batch: a worker's batch freed there or in the worker,
and unmapped with its pages still mapped or let go first.

    python benchmarks/loader_frees.py [--batch-mb 256] [--batches 8] [--repeats 3]

A DataLoader with one spawned worker hands over batches of ``--batch-mb`` in shared memory, as speculators'
loader does. The main thread copies each batch out (as the pinning thread does) and drops it, while a second
Python thread -- standing in for the training thread that launches the step's kernels -- spins and records
the longest time it went without running. ``plain``: the worker lets go of each batch once sent, so the
main thread's drop frees the segment's pages; ``held``: the loader's collate is
``loader_workers.WorkerHeldBatches``, so the main thread only unmaps them; ``let-go``: held, and the copied batch's
pages let go first (``loader_workers.let_go_of_pages``, as the trainer's ``pin_batch`` does), so the drop unmaps an
empty range. The variants alternate, ``--repeats`` times; printed per variant: the median over repeats of the
longest gap and of the mean drop time, with their spread, then ``held_vs_plain_gap_ratio`` and
``let_go_vs_held_drop_ratio``. CPU only: no GPU is involved; on a 2-core machine the worker filling the next batch
takes a core, so the longest gap has a floor of its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import spread  # noqa: E402
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import (  # noqa: E402
    WorkerHeldBatches,
    let_go_of_pages,
)

VARIANTS = ("plain", "held", "let-go")


class Batches:
    """``count`` batches of ``nbytes`` each (the worker fills them: pages it touched, as a collate does)."""

    def __init__(self, count: int, nbytes: int):
        self.count, self.nbytes = count, nbytes

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        import torch

        return torch.full((self.nbytes,), index % 128, dtype=torch.uint8)


def plain_collate(batch):
    return batch


def one_run(variant: str, args) -> tuple[float, float]:
    """(longest gap of the spinning thread, mean seconds per drop) over one pass of the loader."""
    import torch
    from torch.utils.data import DataLoader

    collate = plain_collate if variant == "plain" else WorkerHeldBatches(plain_collate, 3)
    loader = DataLoader(
        Batches(args.batches, args.batch_mb << 20),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
        prefetch_factor=2,
        collate_fn=collate,
    )
    out = torch.empty(args.batch_mb << 20, dtype=torch.uint8)
    batches = iter(loader)
    first = next(batches)  # the worker's start is not what is measured
    out.copy_(first)
    del first
    stop, gap, drops = threading.Event(), [0.0], []

    def spin():
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            gap[0] = max(gap[0], now - last)
            last = now

    spinner = threading.Thread(target=spin)
    spinner.start()
    for batch in batches:
        out.copy_(batch)
        if variant == "let-go":
            let_go_of_pages(batch)
        holder = [batch]
        del batch
        started = time.perf_counter()
        holder.clear()  # the drop: the last reference in this process
        drops.append(time.perf_counter() - started)
    stop.set()
    spinner.join()
    return gap[0], statistics.fmean(drops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-mb", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    print(f"settings: batch_mb={args.batch_mb} batches={args.batches} workers=1 prefetch_factor=2 spawn", flush=True)
    for repeat in range(args.repeats):
        order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
        for name in order:
            gap, drop = one_run(name, args)
            results[name].append((gap, drop))
            line = f"run repeat={repeat + 1} {name}: longest gap {gap * 1000:.1f} ms, drop {drop * 1000:.1f} ms"
            print(line, flush=True)
    medians, drop_medians = {}, {}
    for name, runs in results.items():
        gaps, drops = [g for g, _ in runs], [d for _, d in runs]
        medians[name], drop_medians[name] = statistics.median(gaps), statistics.median(drops)
        print(
            f"{name}: longest gap median {medians[name] * 1000:.1f} ms (spread {spread(gaps):.1%}), "
            f"drop median {statistics.median(drops) * 1000:.1f} ms (spread {spread(drops):.1%})",
            flush=True,
        )
    print(
        f"result held_vs_plain_gap_ratio={medians['held'] / medians['plain']:.3f} "
        f"let_go_vs_held_drop_ratio={drop_medians['let-go'] / drop_medians['held']:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
