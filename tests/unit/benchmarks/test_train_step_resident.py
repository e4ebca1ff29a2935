"""The GPU-bound probe's batches: the resident set spreads over the epoch, every row length compiles before
the timed steps, the timed steps are whole passes, its padded rows are speculators' rows (what it compares
ours with), and the real loader path is timed alone and under the trainer's steps, lines train_gpu.py reads."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.data import DataLoader

from benchmarks.train_step_resident import padded_row, spread_indices, warmup_order, whole_passes
from tests.helpers.synthetic import training_sample


def test_the_resident_set_is_the_whole_epoch_or_spread_evenly_over_it():
    assert spread_indices(5, 0) == [0, 1, 2, 3, 4]
    assert spread_indices(5, 9) == [0, 1, 2, 3, 4]
    assert spread_indices(86, 8) == [5, 16, 26, 37, 48, 59, 69, 80]
    assert spread_indices(10, 2) == [2, 7]


def test_every_row_length_is_compiled_before_the_timed_steps():
    lengths = [7168, 7168, 8192, 7168, 6144, 8192]
    order = warmup_order(lengths, 4)
    assert order == [0, 2, 4, 1]
    assert warmup_order(lengths, 1) == [0, 2, 4]  # never fewer than the distinct lengths
    assert warmup_order([7168], 3) == [0, 0, 0]


def test_the_timed_steps_are_whole_passes_over_the_resident_batches():
    assert whole_passes(60, 86) == 86
    assert whole_passes(60, 8) == 64
    assert whole_passes(30, 15) == 30
    assert whole_passes(0, 15) == 15


class Sampler:  # as speculators' batch sampler: an order per epoch
    epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter([[0, 1], [2, 3], [4]])

    def __len__(self):
        return 3


def rows_loader():
    """Rows of 4 positions, the last one padding (-1): 6 tokens per batch of two rows, 3 in the last."""
    rows = [{"document_ids": torch.tensor([0, 0, 0, -1])} for _ in range(5)]
    return DataLoader(rows, batch_sampler=Sampler())


def test_a_cut_row_padded_back_is_speculators_row():
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import trim_padding

    torch.manual_seed(0)
    samples = [training_sample(n, 8) for n in (700, 600)]
    theirs = CollateFn(3072, 8, 3, dtype=torch.float32, preprocess=shift_batch)(samples)
    cut = trim_padding(theirs, 3072)
    assert cut["input_ids"].shape[1] == 2048
    back = padded_row(cut, 3072)
    assert back.keys() == theirs.keys()
    for key, want in theirs.items():
        got = back[key]
        assert torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want, key


def test_the_loader_path_alone_is_timed_per_epoch_and_read_by_train_gpu(capsys):
    from benchmarks.train_runs import ProbeLog
    from benchmarks.train_step_resident import loader_epochs
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import DeviceBatches

    loader_epochs(DeviceBatches(rows_loader(), torch.device("cpu"), last_epoch=1), 2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" seconds=")[0] for line in lines] == [
        f"probe loader epoch={epoch} batches=3 tokens=15" for epoch in (0, 1)
    ]
    assert all(" waited=" in line and " first_batch=" in line for line in lines)
    log = ProbeLog("gpu-bound")
    for line in lines:
        log.info(line)
    assert len(log.loader_rates) == 2 and all(rate > 0 for rate in log.loader_rates)


def test_the_steps_on_the_real_loader_path_are_timed_per_epoch_and_read_by_train_gpu(capsys):
    from benchmarks.train_runs import ProbeLog
    from benchmarks.train_step_resident import real_epochs
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import DeviceBatches

    class Config(NamedTuple):  # speculators' TrainerConfig is one
        log_freq: int

    class Trainer:  # speculators' train_epoch as far as the loader and the logging interval go
        def __init__(self):
            self.epochs, self.steps, self.config = [], 0, Config(log_freq=10)

        def train_epoch(self, epoch):
            self.train_loader.batch_sampler.set_epoch(epoch)
            self.epochs.append((epoch, self.config.log_freq))
            for _batch in self.train_loader:
                self.steps += 1

    trainer = Trainer()
    loader = DeviceBatches(rows_loader(), torch.device("cpu"), last_epoch=3)
    real_epochs(trainer, loader, 2)
    assert trainer.epochs == [(1, 10), (2, 10)] and trainer.steps == 6
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" seconds=")[0] for line in lines] == [
        f"probe real epoch={epoch} batches=3 tokens=15" for epoch in (1, 2)
    ]
    assert all(" step_ms=" in line and " waited=" in line and line.endswith(" log_freq=10") for line in lines)
    real_epochs(trainer, loader, 3, log_freqs=(10, 1000))  # every other epoch with no logged step
    assert trainer.epochs[2:] == [(1, 10), (2, 1000), (3, 10)] and trainer.config.log_freq == 10
    capsys.readouterr()
    log = ProbeLog("gpu-bound")
    for line in lines:
        log.info(line)
    assert len(log.real_rates) == 2 and all(rate > 0 for rate in log.real_rates) and not log.loader_rates


def test_resident_steps_beside_a_loader_building_an_epoch_are_timed_with_and_without_pinning(capsys):
    from benchmarks.train_step_resident import BESIDE, steps_beside_loading

    class Trainer:
        steps = 0

        def train_epoch(self, epoch):
            for _batch in self.train_loader:
                self.steps += 1

    resident = [{"document_ids": torch.tensor([[0, 0, -1]])}] * 4
    trainer = Trainer()
    pinned = []
    for kind in BESIDE:
        # No GPU to pin for: the staged kind's copy only counts its batches.
        steps_beside_loading(trainer, rows_loader(), resident, [2] * 4, kind, pin=lambda b: pinned.append(b) or b)
    assert trainer.steps == 16
    assert len(pinned) == 2  # the staged kind's batches after the first, which started its workers
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" seconds=")[0] for line in lines] == [
        f"probe beside loading={kind} steps=4 tokens=8" for kind in ("staged", "pinned", "unpinned", "pinned-plain")
    ]
    assert all(" batches_built=3 " in line for line in lines)  # the whole epoch, its first batch before timing


def test_the_plain_loader_beside_the_steps_has_workers_that_let_go_of_their_batches():
    from torch.utils.data import default_collate

    from benchmarks.train_step_resident import beside_settings
    from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import WorkerHeldBatches

    loader = DataLoader(list(range(4)), batch_size=2, collate_fn=WorkerHeldBatches(default_collate, 3))
    assert beside_settings(loader, "staged") == {"pin_memory": False}
    assert beside_settings(loader, "pinned") == {"pin_memory": True}
    assert beside_settings(loader, "unpinned") == {"pin_memory": False}
    assert beside_settings(loader, "pinned-plain") == {"pin_memory": True, "collate_fn": default_collate}
