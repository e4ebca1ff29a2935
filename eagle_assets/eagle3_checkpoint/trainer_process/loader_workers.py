"""speculators' DataLoader workers, sized to the host and kept from page-faulting every batch.

Measured on an H200 host (16 cores) with an 8B verifier's features (``benchmarks/train_gpu.py``): a
training step's GPU work takes ~162 ms, but with speculators' loader (12 workers) steps took 180-200 ms,
waiting for batches. Each worker builds a ~270 MB packed row per batch from freshly allocated
buffers; glibc serves allocations that large with new ``mmap`` regions, so every batch first-touches
(page-faults and zeroes) each buffer again. Both of these brought steps to 164-166 ms:

- :func:`keep_worker_memory`: in each worker, glibc serves large buffers from its heap and keeps freed
  memory (``mallopt``), so the next batch reuses pages already mapped;
- :func:`gpu_worker_count`: one worker per CPU core left to each training process, not a fixed 12.

Batches, their order and contents are unchanged; only where their bytes live is.
"""

from __future__ import annotations

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


def keep_memory_in(loader) -> None:
    """Run :func:`keep_worker_memory` first in ``loader``'s workers (set before its first iteration)."""
    if loader is not None and loader.num_workers:
        # A partial of the two functions, not a patched module attribute: spawned workers unpickle
        # both by their module names.
        loader.worker_init_fn = functools.partial(keep_worker_memory, then=loader.worker_init_fn)


def gpu_worker_count(processes: int) -> int:
    """Loader workers per training process on a GPU host: the cores left after one per process."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, cores // max(1, processes) - 1)
