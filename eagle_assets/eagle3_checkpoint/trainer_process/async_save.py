"""The best epoch's checkpoint written by a background thread while the next epoch trains.

speculators' ``Trainer.maybe_update_best`` (``--save-best``) saves an improved epoch synchronously: on a
Kimi-K2.5-sized draft that is seconds per improved epoch with the GPU idle. Here the training thread only
takes a snapshot (the state dicts converted exactly as speculators' ``SingleGPUCheckpointer.save_checkpoint``
converts them, copied to host memory) and a single writer thread (FIFO) writes it with speculators' own
file names and helpers, so the folder holds exactly what speculators would have written.

Crash safety: an epoch is written into ``<checkpoints>/.<epoch>.partial/``, fsynced, renamed to
``<checkpoints>/<epoch>`` in one step, and only then is ``checkpoint_best`` swapped (also in one step) and
the older epochs removed. A crash leaves the previous best (with its link) or the new one; the leftover
``.<epoch>.partial`` has no numeric name, so speculators' resume (``_get_previous_epoch``) never takes it
for an epoch, and :func:`recover_interrupted_saves` removes it at the next start.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import queue
import re
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from speculators.train.checkpointer import _as_list, convert_float_dtype, patch_config_dtype
from torch.nn.parallel import DistributedDataParallel

logger = logging.getLogger("eagle_assets.eagle3_checkpoint")

# speculators saves checkpoints in bf16 (the float_dtype default of its save_checkpoint).
SAVE_DTYPE = torch.bfloat16

_PARTIAL = re.compile(r"\.(\d+)\.partial")
_BEST_TMP = ".checkpoint_best.tmp"  # the new link before it is renamed over checkpoint_best


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(dirpath))


def recover_interrupted_saves(root: Path) -> None:
    """Clear what a crashed save left under ``root`` (rank 0, before speculators reads the folder): unfinished
    ``.<epoch>.partial`` folders and a half-made link."""
    if not root.is_dir():
        return
    for child in root.iterdir():
        if _PARTIAL.fullmatch(child.name) or child.name == _BEST_TMP:
            logger.warning("removing %s, left by an interrupted checkpoint save", child)
            _remove(child)


class HostBuffers:
    """Host tensors the snapshots are copied into, kept from one save to the next so later saves fault in no
    new pages. A buffer is reused only after the save that used it has been joined. Pageable, not pinned:
    pinning a Kimi-K2.5-sized draft's ~7 GB (the caching host allocator rounds each block up to a power of
    two) blocked the first save for 6.6 s on an H100, most of what the background save is meant to win."""

    def __init__(self):
        self._free: dict[tuple, list[torch.Tensor]] = defaultdict(list)
        self._lent: list[torch.Tensor] = []

    def copy_of(self, tensor: torch.Tensor) -> torch.Tensor:
        pool = self._free[(tuple(tensor.shape), tensor.dtype)]
        buffer = pool.pop() if pool else torch.empty(tensor.shape, dtype=tensor.dtype)
        self._lent.append(buffer)
        buffer.copy_(tensor)  # from the GPU: returns once the copy has landed
        return buffer

    def reclaim(self) -> None:
        for buffer in self._lent:
            self._free[(tuple(buffer.shape), buffer.dtype)].append(buffer)
        self._lent = []


def snapshot_tree(tree, buffers: HostBuffers):
    """``tree`` with every tensor converted by speculators' ``convert_float_dtype`` (one tensor at a time, so
    the converted copies never all sit on the GPU at once) and copied to host memory. Tensors that still alias
    each other after the conversion (speculators would pass them aliased to ``save_pretrained``, which drops
    tied duplicates) share one copy."""
    shared: dict[tuple, torch.Tensor] = {}

    def copy_leaf(leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        converted = convert_float_dtype(leaf, SAVE_DTYPE)
        if converted is not leaf:
            return buffers.copy_of(converted)
        key = (leaf.data_ptr(), leaf.dtype, leaf.device, tuple(leaf.shape), leaf.stride())
        if key not in shared:
            shared[key] = buffers.copy_of(leaf)
        return shared[key]

    return pytree.tree_map(copy_leaf, tree)


@dataclass
class Snapshot:
    """One best epoch as speculators would save it, in host memory."""

    epoch: int
    model_state: dict
    optimizer_payload: object
    scheduler_payload: object | None
    val_metrics: dict
    seconds: float


def take_snapshot(model, optimizers, schedulers, epoch: int, val_metrics: dict, buffers: HostBuffers) -> Snapshot:
    """The training thread's (blocking) part of a save; its tensors no longer change with training."""
    started = time.perf_counter()
    raw_model = model.module if isinstance(model, DistributedDataParallel) else model
    model_state = snapshot_tree(raw_model.state_dict(), buffers)
    optimizer_states = [snapshot_tree(opt.state_dict(), buffers) for opt in _as_list(optimizers)]
    scheduler_states = [copy.deepcopy(sched.state_dict()) for sched in _as_list(schedulers or [])]
    return Snapshot(
        epoch,
        model_state,
        _payload(optimizer_states),
        _payload(scheduler_states) if scheduler_states else None,
        dict(val_metrics),
        time.perf_counter() - started,
    )


def _payload(state_dicts: list):
    """speculators' format: a single optimizer's (scheduler's) state dict bare, several as a list."""
    return state_dicts[0] if len(state_dicts) == 1 else state_dicts


def _unwrapped(checkpointer, name: str) -> Callable:
    """A checkpointer method without its ``_rank0_only`` barrier: the writer runs on rank 0 only, off the
    training thread, where a collective would deadlock."""
    return inspect.unwrap(getattr(type(checkpointer), name)).__get__(checkpointer)


def point_best_at(checkpointer, epoch: int) -> None:
    """Make ``checkpoint_best`` the relative link ``<epoch>`` (speculators' link) by renaming a new link over
    the old one: the link is never missing or half made."""
    best = checkpointer.best_path()
    if best.is_dir() and not best.is_symlink():
        _unwrapped(checkpointer, "update_best_symlink")(epoch)
        return
    tmp = best.with_name(_BEST_TMP)
    _remove(tmp)
    tmp.symlink_to(Path(str(epoch)), target_is_directory=True)
    os.replace(tmp, best)
    _fsync_dir(best.parent)


def write_best_epoch(checkpointer, raw_model, snapshot: Snapshot) -> None:
    """Write ``snapshot`` as speculators' save_checkpoint, save_scheduler_state_dict and save_val_metrics
    would, in a partial folder renamed into place once complete; then link it as best and drop the rest."""
    epoch, partial = snapshot.epoch, f".{snapshot.epoch}.partial"
    root = checkpointer.path
    folder, final = root / partial, root / str(epoch)
    _remove(folder)
    raw_model.save_pretrained(folder, state_dict=dict(snapshot.model_state))
    patch_config_dtype(folder / "config.json", SAVE_DTYPE)
    torch.save(snapshot.optimizer_payload, checkpointer.optimizer_path(partial))
    checkpointer._copy_train_command(partial)
    if snapshot.scheduler_payload is not None:
        torch.save(snapshot.scheduler_payload, checkpointer.scheduler_path(partial))
    _unwrapped(checkpointer, "save_val_metrics")(partial, snapshot.val_metrics)
    _fsync_tree(folder)
    if final.exists() or final.is_symlink():
        # speculators resumes after its last saved epoch and saves only improved ones (--save-best): an epoch
        # it saves again would mean another trainer shares this folder.
        raise FileExistsError(f"{final} exists: epoch {epoch} was saved before in this trainer folder")
    os.rename(folder, final)
    _fsync_dir(root)
    point_best_at(checkpointer, epoch)
    _unwrapped(checkpointer, "cleanup_keep_only_best")(best_epoch=epoch)


class BackgroundWriter:
    """One thread running submitted jobs in order. A job's error is kept and raised, on the calling thread,
    by the next :meth:`join` (or :meth:`raise_error`, :meth:`close`); jobs queued behind a failed one are skipped."""

    def __init__(self, name: str = "best-checkpoint-writer"):
        self._jobs: queue.Queue = queue.Queue()
        self._error: tuple[str, BaseException] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], description: str) -> None:
        self._jobs.put((job, description))

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            try:
                if item is None:
                    return
                job, description = item
                if self._error is None:
                    job()
            except BaseException as exc:
                self._error = (description, exc)
            finally:
                self._jobs.task_done()

    def wait(self) -> None:
        """Until every submitted job has run; raises nothing."""
        self._jobs.join()

    def join(self) -> None:
        self.wait()
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            (description, exc), self._error = self._error, None
            raise RuntimeError(f"{description} failed in the background: {exc!r}") from exc

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        self.raise_error()


class BestCheckpointSaves:
    """The best-epoch save of speculators' ``Trainer.maybe_update_best`` made asynchronous: rank 0 snapshots
    and hands the writing to a :class:`BackgroundWriter`; other ranks, which write nothing under speculators'
    ``_rank0_only`` either, do nothing and wait for nobody."""

    def __init__(self, checkpointer, rank: int):
        self.checkpointer = checkpointer
        self.writer = BackgroundWriter() if rank == 0 else None
        self.buffers = HostBuffers()

    def save(self, model, optimizers, schedulers, epoch: int, val_metrics: dict) -> None:
        if self.writer is None:
            return
        self.writer.join()  # the previous save is complete (or its error raised) before its buffers are reused
        self.buffers.reclaim()
        snapshot = take_snapshot(model, optimizers, schedulers, epoch, val_metrics, self.buffers)
        raw_model = model.module if isinstance(model, DistributedDataParallel) else model

        def write() -> None:
            started = time.perf_counter()
            write_best_epoch(self.checkpointer, raw_model, snapshot)
            seconds = time.perf_counter() - started
            logger.info(
                f"best epoch {epoch} saved in the background: snapshot {snapshot.seconds:.1f}s, write {seconds:.1f}s"
            )

        self.writer.submit(write, f"saving best epoch {epoch}")

    def raise_error(self) -> None:
        if self.writer is not None:
            self.writer.raise_error()

    def wait(self) -> None:
        if self.writer is not None:
            self.writer.wait()

    def close(self) -> None:
        """Wait for the last save and stop the writer; raises a save's error."""
        if self.writer is not None:
            self.writer.close()
