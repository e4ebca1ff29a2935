"""Loader workers keep their large buffers mapped, and GPU hosts get one worker per spare core."""

from __future__ import annotations

import functools

import torch
from torch.utils.data import DataLoader, Dataset

from eagle_assets.eagle3_checkpoint.trainer_process import loader_workers
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import gpu_worker_count, keep_memory_in
from tests.helpers.patching import shadow

BUFFER_BYTES = 64 << 20  # above glibc's largest mmap threshold (32 MiB): mmap'd unless told otherwise


def mapping_of(address: int) -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5] if len(fields) > 5 else "anonymous mmap"
    raise AssertionError(f"{address:#x} is in no mapping")


class BigBuffers(Dataset):
    """Reports where a freshly allocated packed-row-sized buffer lives, and which initialisers ran."""

    def __len__(self):
        return 2

    def __getitem__(self, index):
        buffer = torch.empty(BUFFER_BYTES, dtype=torch.uint8)
        return mapping_of(buffer.data_ptr()), torch.utils.data.get_worker_info().seed == SEEN.get("seed")


SEEN: dict = {}


def speculators_like_init(worker_id: int) -> None:
    SEEN["seed"] = torch.utils.data.get_worker_info().seed


def loader() -> DataLoader:
    # A spawned worker, as speculators starts them: both initialisers must survive pickling by name.
    return DataLoader(
        BigBuffers(),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
        worker_init_fn=speculators_like_init,
    )


def test_workers_serve_large_buffers_from_the_heap_and_still_run_the_loaders_own_initialiser():
    plain = loader()
    assert [where for where, _ in plain] == ["anonymous mmap"] * 2

    kept = loader()
    keep_memory_in(kept)
    assert isinstance(kept.worker_init_fn, functools.partial)
    assert [tuple(item) for item in kept] == [("[heap]", True)] * 2


def test_loaders_without_workers_are_left_alone():
    plain = DataLoader(BigBuffers(), batch_size=None)
    keep_memory_in(plain)
    keep_memory_in(None)
    assert plain.worker_init_fn is None


def test_gpu_hosts_get_one_worker_per_core_left_to_each_training_process(monkeypatch):
    shadow(monkeypatch, loader_workers, "os", sched_getaffinity=lambda pid: set(range(16)))
    assert gpu_worker_count(1) == 15
    assert gpu_worker_count(8) == 2  # two cores per GPU: never fewer than two workers
    shadow(monkeypatch, loader_workers, "os", sched_getaffinity=lambda pid: set(range(128)))
    assert gpu_worker_count(8) == 15


def shared_segment(tensor: torch.Tensor) -> str:
    name = mapping_of(tensor.data_ptr())
    assert name.startswith("/dev/shm/"), name  # a worker's batch arrives in shared memory
    return name


def mapped_by(pid: int, segment: str) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return any(segment in line for line in maps)


class Rows(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        return torch.full((BUFFER_BYTES // 8,), index, dtype=torch.int64)


def test_workers_still_hold_each_batch_when_the_training_process_lets_go_of_it():
    """So the batch's shared memory is freed in the worker, not by the training process's loader thread."""

    def rows_loader(**kwargs):
        return DataLoader(Rows(), batch_size=2, num_workers=1, multiprocessing_context="spawn", **kwargs)

    plain = [batch.clone() for batch in rows_loader()]
    held = rows_loader(prefetch_factor=2)
    keep_memory_in(held)
    assert isinstance(held.collate_fn, loader_workers.WorkerHeldBatches)
    assert held.collate_fn.keep == 3  # the worker's batches in flight, and the one the training process uses
    batches = iter(held)
    worker = batches._workers[0].pid
    received = []
    for batch in batches:
        # The worker has built at most prefetch_factor batches past this one: it still maps this one.
        assert mapped_by(worker, shared_segment(batch))
        received.append(batch.clone())
    assert len(received) == len(plain) == 3
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(received, plain, strict=True))


def test_a_worker_lets_go_of_its_oldest_batch_before_building_the_next():
    kept = loader_workers.WorkerHeldBatches(lambda samples: list(samples), keep=2)
    held_at_call = []
    kept.collate = lambda samples: held_at_call.append(len(kept.held)) or list(samples)
    for n in range(4):
        kept([n])
    assert held_at_call == [0, 1, 1, 1]  # never more than keep alive while a batch is allocated
    assert list(kept.held) == [[2], [3]]


def test_a_pinning_loader_holds_only_the_batches_in_flight():
    pinning = DataLoader(Rows(), batch_size=2, num_workers=1, pin_memory=True, prefetch_factor=4)
    keep_memory_in(pinning)
    assert pinning.collate_fn.keep == 4  # pinned and dropped before the training process takes it
