"""One loader iterator across a training's epochs, so that its workers never wait at an epoch's end.

speculators' loader keeps ``workers x prefetch_factor`` batches in flight (15 x 4 on a 16-core GPU host), but
only within an epoch: once the epoch's last batches are asked for, the workers wait until the trainer asks for
the next epoch's first batch, after that last step, the checkpoint save and the validation. Measured on one
H100 (8B draft, 6-8K-token rows, 86 steps an epoch): the second epoch started with its batches built during the
first validation's 26 s of compiling, the third after a 1.3 s validation, and it ran 1.2-2.2 s longer, its
first steps ~250 ms against ~160 ms later.

:class:`ChainedEpochs` is the batch sampler of a copy of the trainer's loader: the batches of one epoch, then
of the next, up to the last, so the workers build the next epoch's first batches while this epoch's last steps
run. Each later epoch's batches come from a private copy of the trainer's sampler set to that epoch, and the
chain hands an epoch's batches over only when they are the batches the trainer's own sampler has for it;
otherwise (a resumed epoch's remaining batches, an epoch out of order, an epoch left unfinished) a new chain
starts at that epoch. Batches, their order and contents are unchanged.

Measured with it (the same set): the training thread waits 0.01 s per timed epoch for batches, but the two timed
epochs add up to the same 29.4-29.8 s: the loading that epoch 2 used to get done during the first validation
now runs beside its last steps, and building batches costs the steps beside it even when none waits.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator

import numpy as np
from torch.utils.data import DataLoader


def chainable(loader) -> bool:
    """Whether ``loader``'s epochs can be chained: a DataLoader whose batch sampler takes (and tells) an epoch."""
    sampler = getattr(loader, "batch_sampler", None)
    return isinstance(loader, DataLoader) and hasattr(sampler, "set_epoch") and hasattr(sampler, "epoch")


def same_batches(ours: list | None, theirs: list) -> bool:
    return ours is not None and len(ours) == len(theirs) and all(map(np.array_equal, ours, theirs))


def loader_like(loader: DataLoader, batch_sampler, **changes) -> DataLoader:
    """A DataLoader as ``loader`` (workers, collate, pinning, prefetch) drawing its batches from ``batch_sampler``,
    with ``changes`` to its other settings."""
    settings = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
        "in_order": loader.in_order,
    }
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, **{**settings, **changes})


class ChainedEpochs:
    """The batches of ``loader``'s epochs, from one iterator of a loader like it, up to ``last_epoch``."""

    def __init__(self, loader: DataLoader, last_epoch: int):
        self.trainer_loader = loader
        self.last_epoch = last_epoch
        self.loader = loader_like(loader, self)
        self.first = 0  # the epoch the running iterator started at
        self.orders: dict[int, list] = {}  # each epoch's batches, as the chain yields (or will yield) them
        self.next_epoch: int | None = None  # the epoch the running iterator's next batch opens; None: no such
        self.iterator: Iterator | None = None

    def _order(self, epoch: int) -> list:
        if epoch not in self.orders:
            sampler = copy.copy(self.trainer_loader.batch_sampler)  # the trainer's own keeps its epoch and cache
            sampler.set_epoch(epoch)
            self.orders[epoch] = list(sampler)
        return self.orders[epoch]

    def __iter__(self):
        """The loader's batches of indices: called by the DataLoader when an iterator starts (or restarts)."""
        for epoch in range(self.first, max(self.first, self.last_epoch) + 1):
            yield from self._order(epoch)

    def take(self) -> Iterator:
        """The batches of the epoch the trainer's sampler is set to."""
        epoch = self.trainer_loader.batch_sampler.epoch
        wanted = list(self.trainer_loader.batch_sampler)
        if self.next_epoch != epoch or not same_batches(self._order(epoch), wanted):
            self.first, self.orders = epoch, {epoch: wanted}
            # Persistent workers: the running iterator is reset, dropping the batches it had in flight.
            self.iterator = iter(self.loader)
        self.next_epoch = None  # until every batch of this epoch is taken
        return self._batches(epoch, len(wanted))

    def _batches(self, epoch: int, count: int) -> Iterator:
        for taken, batch in enumerate(itertools.islice(self.iterator, count), 1):
            if taken == count:  # the epoch is whole once its last batch is handed over
                self.next_epoch = epoch + 1
                self.orders = {e: order for e, order in self.orders.items() if e > epoch}
            yield batch
