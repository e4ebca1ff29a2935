"""speculators' DataLoader workers, sized to the host, kept from page-faulting every batch, and freeing their
batches' shared memory themselves.

Measured on an H200 host (16 cores) with an 8B verifier's features (``benchmarks/train_gpu.py``): a
training step's GPU work takes ~162 ms, but with speculators' loader (12 workers) steps took 180-200 ms,
waiting for batches. Each worker builds a ~270 MB packed row per batch from freshly allocated
buffers; glibc serves allocations that large with new ``mmap`` regions, so every batch first-touches
(page-faults and zeroes) each buffer again. Both of these brought steps to 164-166 ms:

- :func:`keep_worker_memory`: in each worker, glibc serves large buffers from its heap and keeps freed
  memory (``mallopt``), so the next batch reuses pages already mapped;
- :func:`gpu_worker_count`: one worker per CPU core left to each training process, not a fixed 12.

Then, on one H100 at 6-8K-token rows (``benchmarks/train_step_probe.py --real-epochs``), no step waited for a
batch, yet every batch built beside the steps cost them ~33-38 ms. A worker hands its batch over in shared
memory and lets go of it; the training process's loader thread pins the batch and drops it, and with the last
mapping gone the kernel frees the segment's pages there, holding the GIL, while the training thread cannot
launch the step's kernels. :class:`WorkerHeldBatches` keeps each worker's last batches referenced in the
worker, so the training process only unmaps them and the worker frees the pages later
(``benchmarks/loader_frees.py``, 256 MB batches on the 2-core development machine: a spinning thread's
longest stall 107.5 ms when the main thread frees them, 21.4 ms when the worker does). The cost: a batch's
shared memory lives until its worker starts on its next batch, not until it is pinned.

Batches, their order and contents are unchanged; only where their bytes live, and where they are freed, is.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
KEEP_FREED_BYTES = 1 << 30


def keep_worker_memory(worker_id: int, then=None) -> None:
    """DataLoader ``worker_init_fn``: large buffers from the heap, freed memory kept; then ``then``."""
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "mallopt"):  # glibc; other C libraries keep their own policy
            libc.mallopt(M_MMAP_MAX, 0)
            libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    if then is not None:
        then(worker_id)


class WorkerHeldBatches:
    """``collate``, holding the last ``keep`` batches it built in its loader worker: their shared memory is freed by
    the worker, once the training process has let go of it too (module docstring)."""

    def __init__(self, collate, keep: int):
        self.collate = collate
        self.keep = keep
        self.held = collections.deque()

    def __call__(self, samples):
        # Asked for another batch, so the oldest held one has been taken (see keep_memory_in): let it go before
        # this one is allocated.
        while len(self.held) >= self.keep:
            self.held.popleft()
        batch = self.collate(samples)
        self.held.append(batch)
        return batch

    def __getattr__(self, name):
        if name in ("collate", "keep", "held"):  # unpickling in a worker, before the attributes are set
            raise AttributeError(name)
        return getattr(self.collate, name)  # max_len ...


def keep_memory_in(loader) -> None:
    """Run :func:`keep_worker_memory` first in ``loader``'s workers, and have them hold their batches
    (:class:`WorkerHeldBatches`); set before its first iteration.

    A worker is asked for its next batch once the training process has taken the one it built ``prefetch_factor``
    batches ago (the DataLoader hands tasks to its workers in turn, one per batch taken, in order), so it holds
    ``prefetch_factor``: a pinning loader has copied a batch and dropped the worker's memory by the time it is
    taken; without pinning the training process uses that memory for one step more, so one more is held."""
    if loader is not None and loader.num_workers:
        # A partial of the two functions, not a patched module attribute: spawned workers unpickle
        # both by their module names.
        loader.worker_init_fn = functools.partial(keep_worker_memory, then=loader.worker_init_fn)
        keep = loader.prefetch_factor + (0 if loader.pin_memory else 1)
        loader.collate_fn = WorkerHeldBatches(loader.collate_fn, keep)


def gpu_worker_count(processes: int) -> int:
    """Loader workers per training process on a GPU host: the cores left after one per process."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, cores // max(1, processes) - 1)
