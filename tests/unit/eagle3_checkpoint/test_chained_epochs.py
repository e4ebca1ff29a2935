"""One loader iterator across the epochs (``ChainedEpochs``, through ``DeviceBatches``): each epoch gets the
batches the trainer's sampler has for it, the next epoch's batches are asked for before the trainer asks, and an
epoch the chain did not expect starts a new chain."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import DeviceBatches


class EpochSampler:
    """A batch sampler whose order depends on the epoch; ``resume = (epoch, skip)`` drops that epoch's first
    ``skip`` batches, as speculators' trainer slices its sampler's batches to resume within an epoch."""

    def __init__(self, rows: int):
        self.rows, self.epoch, self.resume = rows, 0, (-1, 0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = [(i * (self.epoch + 3)) % self.rows for i in range(self.rows)]
        batches = [order[i : i + 2] for i in range(0, self.rows, 2)]
        return iter(batches[self.resume[1] :] if self.resume[0] == self.epoch else batches)

    def __len__(self) -> int:
        return len(list(iter(self)))


def loader_over(sampler: EpochSampler) -> DataLoader:
    # Persistent workers, as speculators builds its loaders: one iterator, reset when a chain starts.
    return DataLoader(
        [{"row": i} for i in range(8)],
        batch_sampler=sampler,
        num_workers=1,
        prefetch_factor=2,
        persistent_workers=True,
        multiprocessing_context="fork",
    )


def epochs_of(loader, sampler: EpochSampler, epochs: list[int]) -> list[list]:
    seen = []
    for epoch in epochs:
        sampler.set_epoch(epoch)  # as speculators' trainer does at the top of each epoch
        seen.append([batch["row"].tolist() for batch in loader])
    return seen


def plain_epochs(epochs: list[int]) -> list[list]:
    sampler = EpochSampler(8)
    return epochs_of(loader_over(sampler), sampler, epochs)


def test_each_epoch_gets_the_trainers_batches_and_the_next_one_is_asked_for_before_the_trainer_asks():
    want = plain_epochs([0, 1, 2])
    sampler = EpochSampler(8)
    batches = DeviceBatches(loader_over(sampler), torch.device("cpu"), last_epoch=2)
    chain = batches.epochs
    first = epochs_of(batches, sampler, [0])
    # The loader already asked for epoch 1's first batches; the trainer's sampler still reads epoch 0.
    assert list(chain.orders) == [1] and chain.next_epoch == 1 and sampler.epoch == 0
    iterator = chain.iterator
    assert first + epochs_of(batches, sampler, [1, 2]) == want
    assert chain.iterator is iterator  # one iterator for the three epochs
    assert chain.orders == {} and next(chain.iterator, None) is None  # nothing after the last epoch


def test_an_epoch_out_of_order_resumed_or_left_unfinished_starts_a_new_chain_with_the_trainers_batches():
    want = plain_epochs([0, 1, 2])
    sampler = EpochSampler(8)
    batches = DeviceBatches(loader_over(sampler), torch.device("cpu"), last_epoch=2)
    assert epochs_of(batches, sampler, [1, 0, 2]) == [want[1], want[0], want[2]]

    sampler.resume = (1, 3)  # resumed after epoch 1's third step: its last batch, then epoch 2 whole
    assert epochs_of(batches, sampler, [1, 2]) == [want[1][3:], want[2]]
    assert batches.epochs.first == 1 and batches.epochs.next_epoch == 3

    sampler.set_epoch(0)
    for _ in batches:
        break  # the trainer stopped within epoch 0 (max_steps): epoch 1 must not get epoch 0's rest
    assert batches.epochs.next_epoch is None
    assert epochs_of(batches, sampler, [1]) == [want[1][3:]]
    sampler.resume = (-1, 0)
    assert epochs_of(batches, sampler, [2]) == [want[2]]


def test_a_loader_without_epochs_is_iterated_as_it_is():
    loader = DataLoader([{"row": i} for i in range(4)], batch_size=2)
    batches = DeviceBatches(loader, torch.device("cpu"), last_epoch=2)
    assert batches.epochs is None
    assert [batch["row"].tolist() for batch in batches] == [[0, 1], [2, 3]]
