"""How an online run splits the host's GPUs between its extraction server and its trainer."""

from __future__ import annotations

import pytest

from eagle_assets.eagle3_checkpoint.online_devices import (
    SHARED_GPU_MEMORY_FRACTION,
    DeviceSplit,
    DeviceSplitError,
    server_engine,
    split_devices,
)


def test_by_default_both_share_every_gpu_and_vllm_leaves_room_for_the_trainer():
    split = split_devices(8)
    assert split == DeviceSplit(tuple(range(8)), tuple(range(8))) and split.shared
    assert split.server_env() == split.trainer_env() == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    engine = server_engine(split, 8, True, {"model": "m"})
    assert engine == {"model": "m", "tensor_parallel_size": 8, "gpu_memory_utilization": SHARED_GPU_MEMORY_FRACTION}
    # The engine arguments' own memory share wins.
    assert server_engine(split, 8, True, {"gpu_memory_utilization": 0.8})["gpu_memory_utilization"] == 0.8
    assert split.describe() == (
        "extraction server on GPUs 0,1,2,3,4,5,6,7, trainer on GPUs 0,1,2,3,4,5,6,7 (shared; vLLM takes 70% of each)"
    )


def test_one_side_named_the_other_takes_the_rest():
    split = split_devices(8, trainer=[6, 7])
    assert split == DeviceSplit((0, 1, 2, 3, 4, 5), (6, 7)) and not split.shared
    assert split.server_env() == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"}
    assert split.trainer_env() == {"CUDA_VISIBLE_DEVICES": "6,7"}
    # An automatic tensor parallelism spans the server's GPUs; its memory share is vLLM's own.
    assert server_engine(split, 8, True, {}) == {"tensor_parallel_size": 6}
    assert split_devices(8, server=[0, 1, 2, 3]) == DeviceSplit((0, 1, 2, 3), (4, 5, 6, 7))
    # A server named on every GPU leaves the trainer nothing of its own: it shares them.
    assert split_devices(2, server=[0, 1]).shared


def test_a_configured_tensor_parallelism_must_fit_the_servers_gpus():
    split = split_devices(8, server=[0, 1, 2, 3])
    assert server_engine(split, 4, False, {})["tensor_parallel_size"] == 4
    with pytest.raises(DeviceSplitError, match="tensor_parallel_size 8 needs 8 GPUs, but the extraction server has 4"):
        server_engine(split, 8, False, {})


def test_devices_the_host_does_not_have_are_refused_and_a_cpu_host_splits_nothing():
    with pytest.raises(DeviceSplitError, match=r"name GPUs \[8, 9\], but this host shows 8 \(0-7\)"):
        split_devices(8, server=[0, 8], trainer=[9])
    with pytest.raises(DeviceSplitError, match="shows none: leave both empty on a CPU host"):
        split_devices(0, trainer=[0])
    cpu = split_devices(0)
    assert cpu == DeviceSplit((), ()) and cpu.server_env() == cpu.trainer_env() == {}
    assert server_engine(cpu, 1, True, {"model": "m"}) == {"model": "m"}
    assert cpu.describe() == "no GPU: the extraction server and the trainer share the CPU"
