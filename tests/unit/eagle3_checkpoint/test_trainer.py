"""The trainer process: its launch command (torchrun for several processes), environment and process
count, and a streamed process stopped once the caller has what it needs."""

from __future__ import annotations

import os
import sys

import pytest

from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.trainer import launch_command, process_env
from tests.helpers.logs import Lines


def test_several_processes_launch_through_torchrun(tmp_path):
    speculators_argv = ["--speculator-type", "eagle3", "--epochs", "2"]
    metrics = tmp_path / "metrics.jsonl"
    single = launch_command(TrainingSettings(), metrics, speculators_argv)
    assert single[:3] == [sys.executable, "-m", "eagle_assets.eagle3_checkpoint.trainer_process.launch"]
    command = launch_command(TrainingSettings(num_processes=4, early_stop_patience=3), metrics, speculators_argv)
    assert command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "-m",
        "eagle_assets.eagle3_checkpoint.trainer_process.launch",
        "--metrics-file",
        str(metrics),
        "--early-stop-patience",
        "3",
        "--cpu-threads",
        "1",
        "--",
        *speculators_argv,
    ]


def test_training_processes_run_with_nvlink_multicast_off_unless_told_otherwise():
    # This process's environment as a mapping of its own: the background demos' training inherits os.environ.
    unset = {name: value for name, value in os.environ.items() if name != "NCCL_NVLS_ENABLE"}
    env = process_env(environ=unset)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    told = {**unset, "NCCL_NVLS_ENABLE": "1"}  # an operator who wants it on gets it
    assert process_env(environ=told)["NCCL_NVLS_ENABLE"] == "1"
    assert process_env.__defaults__[-1] is os.environ  # the process's, read when called


def test_training_processes_default_to_every_gpu_and_never_exceed_them():
    import torch

    assert trainer.resolve_process_count(0, on_cpu=False, visible=2) == 2  # 0 = every visible GPU
    assert trainer.resolve_process_count(0, on_cpu=False) == torch.cuda.device_count()  # what this host shows
    assert trainer.resolve_process_count(2, on_cpu=False, visible=2) == 2
    with pytest.raises(ValueError, match=r"num_processes=4 but this host shows 2 CUDA GPU\(s\)"):
        trainer.resolve_process_count(4, on_cpu=False, visible=2)
    assert trainer.resolve_process_count(0, on_cpu=True, visible=2) == 1
    assert trainer.resolve_process_count(4, on_cpu=True, visible=2) == 4  # gloo on CPU: any count


def test_a_streamed_process_is_stopped_once_the_caller_has_what_it_needs(tmp_path):
    from eagle_assets.eagle3_checkpoint.trainer import run_streaming

    log = Lines()
    endless = [
        sys.executable,
        "-c",
        "import itertools, time\nfor i in itertools.count():\n    print(i, flush=True)\n    time.sleep(0.01)",
    ]
    run_streaming(endless, log, cwd=tmp_path, done=lambda: "3" in log.lines)
    assert log.lines == ["0", "1", "2", "3"]


def test_the_training_console_keeps_its_own_lines_and_drops_metric_dicts_and_http_request_lines():
    import logging

    from eagle_assets.eagle3_checkpoint.trainer_process.launch import ConsoleFilter

    def record(name: str, level: int, msg) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, None, None)

    keep = ConsoleFilter().filter
    assert keep(record("speculators", logging.INFO, "Training epoch 1/2 started"))
    assert not keep(record("speculators.metrics", logging.INFO, {"train/loss": 1.0}))
    # Online features: one request line per generated row would bury the trainer's own lines.
    assert not keep(record("httpx2", logging.INFO, 'HTTP Request: POST http://127.0.0.1:1/v1/completions "200 OK"'))
    assert not keep(record("httpx", logging.INFO, "HTTP Request: GET http://127.0.0.1:1/v1/models"))
    assert keep(record("httpx2", logging.WARNING, "connection refused"))
