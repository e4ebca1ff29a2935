"""Scaling extraction out on one host, the parts that need no worker: which devices get a worker, and how
the rows are sharded; a GPU host's settings refused on a CPU machine before any work."""

from __future__ import annotations

import pytest

from eagle_assets.hidden_states.parallel import shard_sequences
from eagle_assets.plugin_manager import verifier_backend
from eagle_assets.resources.verifier import resolve_devices
from tests.helpers.features import folder, materialize_hidden_states, verifier_for, write_token_sequences

TWO_CPU_WORKERS = ["cpu", "cpu"]


def test_auto_devices_mean_one_worker_per_gpu_only_for_data_parallel_backends():
    transformers, kimi = verifier_backend("transformers"), verifier_backend("kimi")
    assert resolve_devices(["auto"], "auto", transformers, cuda_count=4) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert resolve_devices([], "cuda", transformers, cuda_count=2) == ["cuda:0", "cuda:1"]
    assert resolve_devices(["auto"], "auto", transformers, cuda_count=1) == ["auto"]  # in-process, as before
    assert resolve_devices(["auto"], "cuda:1", transformers, cuda_count=4) == ["cuda:1"]  # a pinned device wins
    assert resolve_devices(["auto"], "cpu", transformers, cuda_count=4) == ["cpu"]
    assert resolve_devices(["auto"], "auto", kimi, cuda_count=8) == ["auto"]  # device_map spreads it itself
    assert resolve_devices(["cuda:1", "cuda:0"], "auto", transformers, cuda_count=2) == ["cuda:1", "cuda:0"]
    assert resolve_devices(TWO_CPU_WORKERS, "auto", transformers, cuda_count=0) == TWO_CPU_WORKERS


@pytest.mark.parametrize(
    ("devices", "backend", "message"),
    [
        (["cpu", "cpu"], "kimi", "backend 'kimi' cannot run one worker per device"),
        (["cuda:0", "cuda:2"], "transformers", "'cuda:2' is not visible: this host shows 2 CUDA device(s)"),
        (["gpu0", "cpu"], "transformers", "'gpu0' is not a device"),
        (["auto", "cuda:0"], "transformers", "'auto' is not a device"),
    ],
)
def test_bad_devices_are_refused_with_the_field_named(devices, backend, message):
    with pytest.raises(ValueError, match=r"verifier.devices") as err:
        resolve_devices(devices, "auto", verifier_backend(backend), cuda_count=2)
    assert message in str(err.value)


def test_shards_are_disjoint_balanced_and_independent_of_input_order():
    lengths = [700, 30, 512, 512, 90, 2048, 5, 1000, 333, 64]
    sequences = [((row, f"{row:032x}"), [7] * n) for row, n in enumerate(lengths)]
    shards = shard_sequences(sequences, 3)
    keys = [key for shard in shards for key, _ in shard]
    assert sorted(keys) == sorted(key for key, _ in sequences) and len(set(keys)) == len(keys)
    loads = sorted(sum(len(ids) for _, ids in shard) for shard in shards)
    assert loads[-1] - loads[0] <= max(lengths[1:])  # greedy longest-first: within one sequence of even
    assert shard_sequences(sequences[::-1], 3) == shards


def test_gpu_devices_on_a_host_without_them_fail_the_step_before_any_work(
    storage_root, quick_tiny_verifier, monkeypatch
):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # a GPU host's settings on a CPU machine
    write_token_sequences(storage_root, quick_tiny_verifier, prompts=2, steps=1)
    result = materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier, devices=["cuda:0", "cuda:1"]))
    assert not result.success
    [event] = result.get_step_failure_events()
    text = event.step_failure_data.user_failure_data.description
    assert "verifier.devices ['cuda:0', 'cuda:1']" in text and "'cuda:1' is not visible: this host shows 0" in text
    assert not folder(storage_root).exists() or not any(folder(storage_root).iterdir())
