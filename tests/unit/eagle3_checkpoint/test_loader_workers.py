"""Loader workers keep their large buffers mapped, and GPU hosts get one worker per spare core."""

from __future__ import annotations

import functools

import pytest
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


def test_the_trainer_takes_pinning_over_from_a_pinning_loader_whose_workers_hold_one_batch_more():
    pinning = DataLoader(Rows(), batch_size=2, num_workers=1, pin_memory=True, prefetch_factor=4)
    assert keep_memory_in(pinning) is True
    assert pinning.pin_memory is False  # pinned_ahead pins instead, after the training process has taken the batch
    assert pinning.collate_fn.keep == 5
    unpinned = DataLoader(Rows(), batch_size=2, num_workers=1, prefetch_factor=4)
    assert keep_memory_in(unpinned) is False and unpinned.collate_fn.keep == 5
    assert keep_memory_in(DataLoader(Rows(), batch_size=2, pin_memory=True)) is False  # no workers: left alone


def resident_kb(address: int) -> int:
    """The resident size of the mapping holding ``address`` in this process."""
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                inside = start <= address < end
            elif inside and fields[0] == "Rss:":
                return int(fields[1])
    raise AssertionError(f"{address:#x} is in no mapping")


def test_letting_go_of_a_shared_batchs_pages_unmaps_them_here_and_keeps_its_bytes():
    shared = torch.arange(BUFFER_BYTES // 8, dtype=torch.int64).share_memory_()
    view = shared[1000:]  # collate hands over views of its buffers: the whole storage is let go
    assert resident_kb(shared.data_ptr()) >= BUFFER_BYTES // 1024 - 4
    loader_workers.let_go_of_pages(view)
    assert resident_kb(shared.data_ptr()) == 0
    assert torch.equal(shared, torch.arange(BUFFER_BYTES // 8, dtype=torch.int64))  # read back from the segment

    private = torch.arange(1 << 20, dtype=torch.int64)
    loader_workers.let_go_of_pages(private)  # not shared memory: MADV_DONTNEED would zero it, so it is left alone
    assert torch.equal(private, torch.arange(1 << 20, dtype=torch.int64))


def copied(batch: dict) -> dict:
    """pin_batch's work without a GPU to pin for: the tensors copied out, the shared ones' pages let go."""
    out = {key: value.clone() for key, value in batch.items()}
    for value in batch.values():
        loader_workers.let_go_of_pages(value)
    return out


def test_batches_pinned_ahead_come_in_order_at_most_depth_ahead_and_errors_reach_the_caller():
    taken = []

    def source():
        for n in range(6):
            taken.append(n)
            yield {"row": torch.full((4,), n).share_memory_()}

    ahead = loader_workers.pinned_ahead(source(), depth=2, pin=copied)
    first = next(ahead)
    assert first["row"].tolist() == [0] * 4 and not first["row"].is_shared()
    import time

    time.sleep(0.2)
    assert len(taken) <= 4  # one handed over, two queued, one being pinned
    assert [batch["row"][0].item() for batch in ahead] == [1, 2, 3, 4, 5]

    def failing():
        yield {"row": torch.zeros(2)}
        raise ValueError("a worker failed")

    ahead = loader_workers.pinned_ahead(failing(), pin=copied)
    assert next(ahead)["row"].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="a worker failed"):
        next(ahead)


def test_closing_the_batches_pinned_ahead_early_stops_the_thread_before_it_returns():
    import threading

    source = iter([{"row": torch.full((2,), n)} for n in range(10)])
    ahead = loader_workers.pinned_ahead(source, depth=1, pin=copied)
    assert next(ahead)["row"].tolist() == [0, 0]
    ahead.close()
    assert not any(thread.name == "pinned-ahead" for thread in threading.enumerate())
    left = [batch["row"][0].item() for batch in source]
    assert left and left == list(range(10 - len(left), 10))  # the rest, untouched by a thread


def test_a_batch_takes_its_rows_states_in_shared_memory_at_full_row_length():
    assert loader_workers.batch_shared_bytes(9216, 4, 4096, fp8=False) == 9216 * (4 * 4096 * 2 + 32) == 302_284_800
    assert loader_workers.batch_shared_bytes(9216, 4, 7168, fp8=False) == 528_777_216  # Kimi-K2.5's
    assert loader_workers.batch_shared_bytes(9216, 4, 4096, fp8=True) == 9216 * (4 * 4096 + 8 + 32)


def test_default_workers_are_as_many_as_the_shared_memory_holds(monkeypatch):
    shadow(monkeypatch, loader_workers, "os", sched_getaffinity=lambda pid: set(range(16)))
    batch = 300_000_000  # each worker holds LOADER_PREFETCH + 1 = 5 of them: 1.5 GB
    assert loader_workers.loader_worker_count(None, 1, batch, 64_000_000_000) == 15  # 34 fit in 80 % of 64 GB
    assert loader_workers.loader_worker_count(None, 1, batch, 10_000_000_000) == 5  # 8 GB usable / 1.5 GB
    assert loader_workers.loader_worker_count(None, 2, batch, 10_000_000_000) == 2  # two processes share it
    assert loader_workers.loader_worker_count(None, 1, batch, 1_000_000_000) == 0  # batches built in-process
    assert loader_workers.loader_worker_count(None, 1, batch, None) == 15  # no /dev/shm to look at: not checked


def test_workers_asked_for_beyond_the_shared_memory_are_refused_naming_the_setting_and_the_fix():
    batch = 300_000_000
    assert loader_workers.loader_worker_count(5, 1, batch, 10_000_000_000) == 5
    with pytest.raises(loader_workers.SharedMemoryError) as refused:
        loader_workers.loader_worker_count(6, 1, batch, 10_000_000_000)
    message = str(refused.value)
    assert "dataloader_workers 6 needs 9.0 GB of shared memory" in message
    assert "/dev/shm has 10.0 GB free: set dataloader_workers to at most 5" in message and "--shm-size" in message
    assert loader_workers.loader_worker_count(0, 1, batch, 0) == 0  # none asked for: nothing to hold
