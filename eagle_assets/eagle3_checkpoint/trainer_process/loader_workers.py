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

Unmapping a batch the pinning copy has read is itself ~23 ms per 256 MB there (the page-table entries torn down,
GIL held). So the trainer pins batches itself (:func:`keep_memory_in` takes pinning over from the DataLoader,
:func:`pinned_ahead` does it in a thread of its own): after the copy it drops the batch's page-table entries with
``madvise`` through ctypes, which releases the GIL, and the drop then unmaps an empty range (~1-3 ms). It also
pins only ``depth`` batches ahead, where the DataLoader's thread pins every batch in flight (15 workers x 4: up to
~16 GB of pinned memory at the 8B shape).

Batches, their order and contents are unchanged; only where their bytes live, and where they are freed, is.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import mmap
import os
import queue
import threading
from collections.abc import Iterator

from eagle_assets.core.layout import FP8

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


def keep_memory_in(loader) -> bool:
    """Run :func:`keep_worker_memory` first in ``loader``'s workers, and have them hold their batches
    (:class:`WorkerHeldBatches`); set before its first iteration. Returns whether the batches are now to be pinned
    by :func:`pinned_ahead`: a pinning loader with workers stops pinning them itself.

    A worker is asked for its next batch once the training process has taken the one it built ``prefetch_factor``
    batches ago (the DataLoader hands tasks to its workers in turn, one per batch taken, in order); the training
    process still reads that one (to pin it, or for a step), so a worker holds one more than ``prefetch_factor``."""
    if loader is None or not loader.num_workers:
        return False
    # A partial of the two functions, not a patched module attribute: spawned workers unpickle
    # both by their module names.
    loader.worker_init_fn = functools.partial(keep_worker_memory, then=loader.worker_init_fn)
    loader.collate_fn = WorkerHeldBatches(loader.collate_fn, loader.prefetch_factor + 1)
    pins = loader.pin_memory
    loader.pin_memory = False
    return pins


_madvise = None


def let_go_of_pages(tensor) -> None:
    """Drop this process's page-table entries of ``tensor``'s storage, when it is shared memory (another process's
    batch): its bytes stay in the segment, and dropping the tensor then unmaps an empty range. The call runs without
    the GIL. Private memory is left alone (``MADV_DONTNEED`` would zero it)."""
    global _madvise
    storage = tensor.untyped_storage()
    if tensor.device.type != "cpu" or not storage.is_shared() or not storage.nbytes():
        return
    if _madvise is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)  # CDLL calls release the GIL
        _madvise = libc.madvise
        _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    start = storage.data_ptr() - storage.data_ptr() % mmap.PAGESIZE
    _madvise(start, storage.data_ptr() + storage.nbytes() - start, mmap.MADV_DONTNEED)


def pin_batch(batch: dict) -> dict:
    """``batch`` with its tensors copied into pinned memory; the originals' pages let go (:func:`let_go_of_pages`)."""
    import torch

    pinned = {key: value.pin_memory() if isinstance(value, torch.Tensor) else value for key, value in batch.items()}
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            let_go_of_pages(value)
    return pinned


_END = object()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


def pinned_ahead(batches: Iterator[dict], depth: int = 2, pin=pin_batch) -> Iterator[dict]:
    """``batches``, each pinned (``pin``: :func:`pin_batch`) by a thread up to ``depth`` batches ahead of the caller.

    The thread alone advances ``batches``; closing this iterator early stops the thread before it returns, so the
    next user of ``batches``' source finds it idle."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def stage():
        try:
            for batch in batches:
                if stop.is_set():
                    return
                pinned = pin(batch)
                del batch  # unmapped here, before the next batch arrives
                ready.put(pinned)
            ready.put(_END)
        except BaseException as error:  # handed to the caller, raised there
            ready.put(_Raised(error))

    thread = threading.Thread(target=stage, name="pinned-ahead", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # a put waiting for room ends once room is made
            try:
                ready.get(timeout=0.05)
            except queue.Empty:
                pass


def gpu_worker_count(processes: int) -> int:
    """Loader workers per training process on a GPU host: the cores left after one per process."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, cores // max(1, processes) - 1)


# speculators' ``--prefetch-factor`` (its default), passed by the trainer so that the two agree.
LOADER_PREFETCH = 4
# Where torch's workers put their batches (``shm_open``), and the share of its free space the loaders may fill.
SHARED_MEMORY = "/dev/shm"
SHARED_MEMORY_SHARE = 0.8


class SharedMemoryError(ValueError):
    pass


def batch_shared_bytes(total_seq_len: int, layers: int, hidden_size: int, fp8: bool) -> int:
    """At most the shared memory one loader batch takes: speculators' collate builds every per-position buffer
    ``total_seq_len`` long -- the captured layers' states (bf16; fp8 with two fp32 scales a token) and four int64
    vectors (8B verifier, 9,216-token rows: 302 MB; Kimi-K2.5's: 529 MB)."""
    states = layers * hidden_size * 2 if not fp8 else layers * hidden_size + 8
    return total_seq_len * (states + 4 * 8)


def loader_worker_count(requested: int | None, processes: int, batch_bytes: int, free_bytes: int | None) -> int:
    """Loader workers per training process: ``requested``, or by default one per core left
    (:func:`gpu_worker_count`) -- as many as the host's shared memory holds. Every worker holds
    ``LOADER_PREFETCH + 1`` batches there (:func:`keep_memory_in`), for each of ``processes``;
    ``free_bytes`` None: not known, not checked."""
    wanted = gpu_worker_count(processes) if requested is None else requested
    if free_bytes is None or not wanted:
        return wanted
    per_worker = batch_bytes * (LOADER_PREFETCH + 1) * max(1, processes)
    fits = int(free_bytes * SHARED_MEMORY_SHARE // per_worker)
    if requested is None:
        return min(wanted, fits)
    if requested > fits:
        raise SharedMemoryError(
            f"training dataloader_workers {requested} needs {requested * per_worker / 1e9:.1f} GB of shared memory "
            f"({processes} process(es) x {LOADER_PREFETCH + 1} batches of {batch_bytes / 1e6:.0f} MB a worker) and "
            f"{SHARED_MEMORY} has {free_bytes / 1e9:.1f} GB free: set dataloader_workers to at most {fits} (or unset "
            "it), or give the host more shared memory (docker --shm-size, a Memory-backed emptyDir on Kubernetes)"
        )
    return requested


def shared_memory_free(path: str = SHARED_MEMORY) -> int | None:
    """Free bytes where workers put their batches; None where there is no such folder."""
    import shutil

    return shutil.disk_usage(path).free if os.path.isdir(path) else None


def loader_flags(settings, data, on_cpu: bool) -> dict:
    """speculators' ``num_workers`` and ``prefetch_factor`` for a run with ``settings`` (``TrainingSettings``:
    ``dataloader_workers``, ``num_processes``, ``total_seq_len``) on ``data`` (its ``manifest``: the feature files'
    layers, hidden size and dtype). On CPU, by default none: spawned loader processes cost more than they save
    there; on GPU hosts speculators' fixed 12 left an H200 waiting for batches (:func:`loader_worker_count`)."""
    requested = settings.dataloader_workers
    if on_cpu and requested is None:
        workers = 0
    else:
        manifest = data.manifest
        fp8 = manifest.dtype == FP8
        batch = batch_shared_bytes(settings.total_seq_len, len(manifest.layer_ids), manifest.hidden_size, fp8)
        workers = loader_worker_count(requested, settings.num_processes, batch, shared_memory_free())
    return {"num_workers": workers, "prefetch_factor": LOADER_PREFETCH}
