"""The GPU-bound probe's batches (``benchmarks/train_step_probe.py``): which of an epoch's batches stay on the
GPU, the order that compiles every row length before timing, the timed steps as whole passes, and the real
loader path timed beside them (alone, and under the trainer's own steps).

The resident steps are the ceiling ``gpu_bound_fraction`` divides by, so they run the epoch's own rows: by
default every batch of the first epoch (a step's cost grows faster than its tokens -- attention over the
row -- so a few shorter batches would set the ceiling too high, and a few longer ones too low).
"""

from __future__ import annotations

import itertools
import time

LOADER_PROBE_LINE = "probe loader"
REAL_PROBE_LINE = "probe real"
BESIDE_PROBE_LINE = "probe beside"
# A loader built beside the resident steps (``--beside-loading``): pinned as the trainer pins (``staged``:
# ``loader_workers.pinned_ahead``), by the DataLoader's own thread, or not at all, and whether its workers hold
# their last batches (the trainer's collate, ``WorkerHeldBatches``) or let go of each once sent ("plain").
BESIDE = {
    "staged": {"pin_memory": False, "staged": True},
    "pinned": {"pin_memory": True},
    "unpinned": {"pin_memory": False},
    "pinned-plain": {"pin_memory": True, "plain": True},
}


def beside_settings(dataloader, kind: str) -> dict:
    """The DataLoader settings that ``kind`` (:data:`BESIDE`) changes in a loader like ``dataloader``."""
    from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import WorkerHeldBatches

    changes = dict(BESIDE[kind])
    changes.pop("staged", None)
    if changes.pop("plain", False) and isinstance(dataloader.collate_fn, WorkerHeldBatches):
        changes["collate_fn"] = dataloader.collate_fn.collate
    return changes


def spread_indices(total: int, wanted: int) -> list[int]:
    """``wanted`` batch positions spread evenly over an epoch of ``total`` (all of them for ``wanted`` 0)."""
    if wanted <= 0 or wanted >= total:
        return list(range(total))
    return sorted({(2 * k + 1) * total // (2 * wanted) for k in range(wanted)})


def warmup_order(lengths: list[int], steps: int) -> list[int]:
    """Indices of ``steps`` (at least one per distinct length) batches to run before timing: every row length
    first, so that no timed step compiles, then the rest in order."""
    firsts = sorted({length: index for index, length in reversed(list(enumerate(lengths)))}.values())
    rest = [index for index in range(len(lengths)) if index not in firsts]
    return list(itertools.islice(itertools.cycle(firsts + rest), max(steps, len(firsts))))


def whole_passes(steps: int, batches: int) -> int:
    """At least ``steps`` timed steps in whole passes over the ``batches`` resident ones, each counted equally."""
    return batches * max(1, -(-steps // batches))


class ResidentBatches:
    """``steps`` batches cycling through ``batches`` (already on the GPU), as a loader for ``train_epoch``."""

    batch_sampler = None

    def __init__(self, batches: list[dict], steps: int):
        self.batches, self.steps = batches, steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for batch in itertools.islice(itertools.cycle(self.batches), self.steps):
            yield dict(batch)


def padded_row(batch: dict, max_len: int) -> dict:
    """A resident batch padded back to ``max_len`` positions as speculators' collate pads it (zeros; -1 in
    ``document_ids``): the step speculators' trainer runs on the same tokens."""
    import torch.nn.functional as F

    length = batch["document_ids"].shape[1]
    out = {}
    for key, value in batch.items():
        if hasattr(value, "dim") and value.dim() >= 2 and value.shape[1] == length:
            widths = [0, 0] * (value.dim() - 2) + [0, max_len - length]
            value = F.pad(value, widths, value=-1 if key == "document_ids" else 0)
        out[key] = value
    return out


def timed_steps(trainer, batches: list[dict], steps: int, tokens_per_batch: list[int]) -> tuple[float, int]:
    """(seconds, tokens) of ``steps`` of the trainer's own steps cycling through ``batches`` (on the device),
    the device idle before and after."""
    trainer.train_loader = ResidentBatches(batches, steps)
    device = batches[0]["document_ids"].device
    _synchronize(device)
    started = time.perf_counter()
    trainer.train_epoch(0)
    _synchronize(device)
    seconds = time.perf_counter() - started
    return seconds, sum(itertools.islice(itertools.cycle(tokens_per_batch), steps))


class CountedBatches:
    """``loader``'s batches, their tokens summed on the device as they pass (no wait per batch); otherwise the
    loader itself for the trainer (``len``, ``batch_sampler``, ...)."""

    def __init__(self, loader):
        import torch

        self.loader = loader
        self.tokens = torch.zeros((), dtype=torch.int64, device=loader.device)
        self.batches = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __iter__(self):
        for batch in self.loader:
            self.tokens += (batch["document_ids"] != -1).sum()
            self.batches += 1
            yield batch


def _epoch_line(label: str, epoch: int, counted: CountedBatches, seconds: float, loader) -> str:
    tokens = int(counted.tokens)
    return (
        f"{label} epoch={epoch} batches={counted.batches} tokens={tokens} seconds={seconds:.2f} "
        f"step_ms={seconds / max(1, counted.batches) * 1000:.1f} waited={loader.wait.seconds:.2f}s "
        f"first_batch={loader.wait.first_batch_s:.2f}s tokens_per_s={tokens / seconds:.0f}"
    )


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loader_epochs(loader, epochs: int) -> None:
    """Prints each epoch's rate of ``loader`` (the trainer's :class:`DeviceBatches`) iterated with nothing else
    running, epochs set as the trainer sets them; ends with the device idle."""
    for epoch in range(epochs):
        loader.batch_sampler.set_epoch(epoch)
        counted = CountedBatches(loader)
        _synchronize(loader.device)
        started = time.perf_counter()
        for _batch in counted:
            pass
        _synchronize(loader.device)
        print(_epoch_line(LOADER_PROBE_LINE, epoch, counted, time.perf_counter() - started, loader), flush=True)


def real_epochs(trainer, loader, epochs: int, first: int = 1, log_freqs: tuple[int, ...] = ()) -> None:
    """Prints each epoch's rate of the trainer's own steps fed by ``loader`` (the real loader path), epochs
    ``first`` on: the resident steps' rate with the loading beside them, in the same process. Epochs take the
    step-logging intervals in ``log_freqs`` in turn (default: the trainer's own)."""
    own = trainer.config.log_freq
    for epoch in range(first, first + epochs):
        log_freq = log_freqs[(epoch - first) % len(log_freqs)] if log_freqs else own
        trainer.config = trainer.config._replace(log_freq=log_freq)
        counted = CountedBatches(loader)
        trainer.train_loader = counted
        _synchronize(loader.device)
        started = time.perf_counter()
        trainer.train_epoch(epoch)
        _synchronize(loader.device)
        line = _epoch_line(REAL_PROBE_LINE, epoch, counted, time.perf_counter() - started, loader)
        print(f"{line} log_freq={log_freq}", flush=True)
    trainer.config = trainer.config._replace(log_freq=own)


def steps_beside_loading(
    trainer, dataloader, resident: list[dict], tokens_per_batch: list[int], kind: str, pin=None
) -> None:
    """Prints the rate of one pass of resident steps while a thread drains an epoch of a loader like
    ``dataloader`` (the trainer's; its workers started before timing; ``kind`` in :data:`BESIDE`: which pinning
    copy, with or without workers holding their batches; nothing is copied to the GPU): what building batches
    costs the steps beside it, apart from feeding them. ``pin``: the staged kind's copy (``pin_batch``)."""
    import copy
    import threading

    from eagle_assets.eagle3_checkpoint.trainer_process.chained_epochs import loader_like
    from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import pin_batch, pinned_ahead

    sampler = copy.copy(dataloader.batch_sampler)
    sampler.set_epoch(0)
    batches = iter(loader_like(dataloader, sampler, persistent_workers=False, **beside_settings(dataloader, kind)))
    next(batches)  # the workers' start (spawn, imports) is not the steady state
    if BESIDE[kind].get("staged"):
        batches = pinned_ahead(batches, pin=pin or pin_batch)
    drained = [1]

    def drain():
        for _batch in batches:
            drained[0] += 1

    thread = threading.Thread(target=drain, daemon=True)
    started = time.perf_counter()
    thread.start()
    seconds, tokens = timed_steps(trainer, resident, len(resident), tokens_per_batch)
    thread.join()
    print(
        f"{BESIDE_PROBE_LINE} loading={kind} steps={len(resident)} tokens={tokens} "
        f"seconds={seconds:.3f} step_ms={seconds / len(resident) * 1000:.1f} "
        f"tokens_per_s={tokens / seconds:.0f} batches_built={drained[0]} "
        f"drained_after={time.perf_counter() - started:.2f}s",
        flush=True,
    )
