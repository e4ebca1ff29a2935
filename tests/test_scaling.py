"""Scaling out on one host: extraction workers (one process per device) and torchrun training launches.

The multi-process extraction path is exercised for real with two CPU workers on the tiny verifier;
GPU hosts run the very same code with ``cuda:N`` devices.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_hidden_states import folder, materialize_hidden_states, metadata, verifier_for, write_token_sequences
from test_training import PARTITIONS, VOCAB, features  # noqa: F401  (features: the shared random-features fixture)

from eagle_assets import hookimpl
from eagle_assets.backends import ExtractionRequest
from eagle_assets.hidden_states.files import SampleWriter, check_sample, load_sample
from eagle_assets.hidden_states.parallel import ExtractionWorkerFailed, extract_on_devices, resolve_devices, shard_sequences
from eagle_assets.plugin_manager import pm, verifier_backend
from eagle_assets.plugins.transformers_backend import TransformersBackend
from eagle_assets.core.files import file_sha256
from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.saved import load_with_speculators
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.trainer import launch_command, process_env
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.vocab import build_draft_vocab

TWO_CPU_WORKERS = ["cpu", "cpu"]


def written_state(root):
    """What a hidden_states run leaves: index rows, tensor files by name and hash, the manifest."""
    base = folder(root)
    files = {p.name: file_sha256(p) for p in sorted((base / "tensors").iterdir())}
    return pq.read_table(base / "index.parquet").to_pylist(), files, json.loads((base / "manifest.json").read_text())


# ---- devices and shards ----------------------------------------------------------------------------


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


@pytest.mark.parametrize(("devices", "backend", "message"), [
    (["cpu", "cpu"], "kimi", "backend 'kimi' cannot run one worker per device"),
    (["cuda:0", "cuda:2"], "transformers", "'cuda:2' is not visible: this host shows 2 CUDA device(s)"),
    (["gpu0", "cpu"], "transformers", "'gpu0' is not a device"),
    (["auto", "cuda:0"], "transformers", "'auto' is not a device"),
])
def test_bad_devices_are_refused_with_the_field_named(devices, backend, message):
    with pytest.raises(ValueError, match="verifier.devices") as err:
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


# ---- extraction over two CPU worker processes --------------------------------------------------------


@pytest.mark.integration
def test_two_cpu_workers_write_exactly_what_one_process_writes(storage_root, tiny_verifier, tmp_path):
    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=12, steps=3)
    distinct = len(set(map(tuple, sequences["input_ids"].to_pylist())))
    # One row per forward pass (batch_tokens=1): the numbers cannot depend on which rows share a batch,
    # so the two layouts must agree to the bit.
    single = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=1))
    assert single.success and metadata(single)["extraction_workers"] == 1
    expected = written_state(storage_root)
    shutil.move(folder(storage_root), tmp_path / "single")

    parallel = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS))
    assert parallel.success
    meta = metadata(parallel)
    assert meta["extraction_workers"] == 2 and meta["files_written"] == distinct and meta["files_reused"] == 0
    assert meta["bytes_written"] == sum((folder(storage_root) / "tensors" / f).stat().st_size for f in expected[1])
    assert written_state(storage_root) == expected
    assert {c.check_name: c.passed for c in parallel.get_asset_check_evaluations()} == {"files_match_rows": True}

    # Resume: the workers re-extract exactly the missing files, whichever worker wrote them before.
    removed = sorted((folder(storage_root) / "tensors").iterdir())[::3]
    for path in removed:
        path.unlink()
    resumed = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS))
    assert resumed.success
    assert metadata(resumed)["files_written"] == len(removed)
    assert written_state(storage_root) == expected


@pytest.mark.integration
def test_gpu_devices_on_a_host_without_them_fail_the_step_before_any_work(storage_root, tiny_verifier, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # a GPU host's settings on a CPU machine
    write_token_sequences(storage_root, tiny_verifier, prompts=2, steps=1)
    result = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, devices=["cuda:0", "cuda:1"]))
    assert not result.success
    [event] = result.get_step_failure_events()
    text = event.step_failure_data.user_failure_data.description
    assert "verifier.devices ['cuda:0', 'cuda:1']" in text and "'cuda:1' is not visible: this host shows 0" in text
    assert not folder(storage_root).exists() or not any(folder(storage_root).iterdir())


@dataclass
class PoisonedBackend(TransformersBackend):
    """The real transformers backend on a verifier whose embedding of one token is NaN: every row
    holding that token yields NaN states, which the sample writer refuses (a real failure mode of
    broken weights)."""

    poison_token: int = -1

    def load_model(self, model_path, device="auto", dtype="auto"):
        model = super().load_model(model_path, device, dtype)
        model.get_input_embeddings().weight.data[self.poison_token] = float("nan")
        return model


class PoisonedPlugin:
    def __init__(self, token: int):
        self.backend = PoisonedBackend(name="poisoned", description="NaN embedding for one token", poison_token=token)

    @hookimpl
    def register_verifier_backends(self, register):
        register(self.backend)


@pytest.mark.integration
def test_a_failing_worker_fails_the_step_with_its_error_and_keeps_whole_files(storage_root, tiny_verifier):
    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=12, steps=3)
    rows = [tuple(ids) for ids in sequences["input_ids"].to_pylist()]
    # The rarest token: few rows fail, so the other worker has good rows to write before it is stopped.
    token = min(Counter(t for ids in set(rows) for t in set(ids)).items(), key=lambda kv: (kv[1], kv[0]))[0]
    plugin = PoisonedPlugin(token)
    pm.register(plugin, name="poisoned-backend-test-plugin")
    try:
        failed = materialize_hidden_states(
            storage_root, verifier_for(tiny_verifier, backend="poisoned", batch_tokens=1, devices=TWO_CPU_WORKERS))
    finally:
        pm.unregister(plugin)
    assert not failed.success
    [event] = failed.get_step_failure_events()
    error, text = event.step_failure_data.error, ""
    while error is not None:  # Dagster wraps the asset's exception: read the whole chain
        text += error.message
        error = error.cause
    assert "ExtractionWorkerFailed" in text and "extraction worker" in text and "on cpu failed" in text
    assert "hidden_states contain NaN/Inf" in text and "row " in text
    assert not (folder(storage_root) / "index.parquet").exists()

    kept = sorted((folder(storage_root) / "tensors").glob("*.safetensors"))
    for path in kept:  # whatever either worker renamed into place is whole and right
        sample = load_sample(path)
        assert tuple(sample["token_ids"].tolist()) in set(rows) and token not in sample["token_ids"].tolist()
        check_sample(sample["hidden_states"], sample["token_ids"], 4, sample["hidden_states"].shape[-1], path.name)

    fixed = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS))
    assert fixed.success
    meta = metadata(fixed)
    assert meta["files_reused"] == len(kept) and meta["files_written"] == len(set(rows)) - len(kept)
    assert not list((folder(storage_root) / "tensors").glob(".*.tmp"))  # stopped workers' temporaries cleared


@dataclass
class VanishingBackend(TransformersBackend):
    """A worker that is killed outright (as the kernel's OOM killer would) before it can report."""

    def extract(self, model_path, request, sink, progress=None):
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.integration
def test_a_killed_worker_is_reported_with_its_device_and_signal(tiny_verifier, tmp_path):
    backend = VanishingBackend(name="vanishing", description="killed at start")
    request = ExtractionRequest(sequences=[((0, "a" * 32), [1, 2, 3]), ((1, "b" * 32), [4, 5])], layer_ids=[1, 2, 4])
    with pytest.raises(ExtractionWorkerFailed, match=r"extraction worker \d on cpu was killed by signal 9"):
        extract_on_devices(backend, tiny_verifier, request, TWO_CPU_WORKERS, SampleWriter(tmp_path, 3, 64))


@dataclass
class HangingBackend(TransformersBackend):
    """A worker that announces itself (a file named by its pid) and then hangs, as a stuck forward would."""

    ready_dir: str = ""

    def extract(self, model_path, request, sink, progress=None):
        (Path(self.ready_dir) / str(os.getpid())).touch()
        time.sleep(600)


PARENT_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_scaling import HangingBackend
from eagle_assets.backends import ExtractionRequest
from eagle_assets.hidden_states.files import SampleWriter
from eagle_assets.hidden_states.parallel import extract_on_devices
request = ExtractionRequest(sequences=[((0, "a" * 32), [1, 2, 3]), ((1, "b" * 32), [4, 5])], layer_ids=[1, 2, 4])
extract_on_devices(HangingBackend(name="hanging", description="hangs", ready_dir=sys.argv[2]), sys.argv[3], request,
                   ["cpu", "cpu"], SampleWriter(Path(sys.argv[2]), 3, 64))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state letter says it has ended.
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"


def _proc_status(pid: int) -> str:
    """State, parent and signal masks of a process, for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "gone"
    return "; ".join(line for line in lines if line.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk",
                                                                     "SigIgn", "SigCgt"))


@pytest.mark.integration
def test_workers_end_when_the_step_process_is_killed(tiny_verifier, tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT_SCRIPT, str(Path(__file__).parent), str(tmp_path),
                               str(tiny_verifier)])
    try:
        deadline = time.monotonic() + 300
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
        workers = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
        assert len(workers) == 2, "the workers never started"
        parent.kill()  # as a killed Dagster step process: no finally blocks run
        parent.wait()
        # SIGTERM ends them at once (the margin is for a heavily loaded host). Before die_with_parent reset
        # SIGTERM to its default, workers that inherited it ignored from this pytest process outlived 180 s.
        deadline = time.monotonic() + 180
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = {pid: _proc_status(pid) for pid in workers if _alive(pid)}
        assert not survivors, f"workers outlived their killed parent by 180 s: {survivors}"
    finally:
        parent.kill()
        parent.wait()


def test_an_orphaned_worker_terminates_even_when_it_inherited_an_ignored_sigterm():
    # CI's pytest process had SIGTERM ignored by the time the kill test ran, and its workers inherited that:
    # the parent-death signal then did nothing. die_with_parent restores the default; the orphan guard, told
    # a parent the process does not have, then ends it at once by SIGTERM (not by its later _exit).
    script = ("import time; from eagle_assets.core.child_process import die_with_parent, exit_when_orphaned; "
              "die_with_parent(); exit_when_orphaned(-1, poll_s=0.01); time.sleep(60)")
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", script], timeout=60,
                           preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    assert child.returncode == -signal.SIGTERM and time.monotonic() - started < 30


# ---- torchrun training launches ----------------------------------------------------------------------


def test_several_processes_launch_through_torchrun(tmp_path):
    speculators_argv = ["--speculator-type", "eagle3", "--epochs", "2"]
    metrics = tmp_path / "metrics.jsonl"
    single = launch_command(TrainingSettings(), metrics, speculators_argv)
    assert single[:3] == [sys.executable, "-m", "eagle_assets.eagle3_checkpoint.trainer_process.launch"]
    command = launch_command(TrainingSettings(num_processes=4, early_stop_patience=3), metrics, speculators_argv)
    assert command == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4",
        "-m", "eagle_assets.eagle3_checkpoint.trainer_process.launch",
        "--metrics-file", str(metrics), "--early-stop-patience", "3", "--cpu-threads", "1",
        "--", *speculators_argv,
    ]


def test_training_processes_run_with_nvlink_multicast_off_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    env = process_env()
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # an operator who wants it on gets it
    assert process_env()["NCCL_NVLS_ENABLE"] == "1"


def test_training_processes_default_to_every_gpu_and_never_exceed_them(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert trainer.resolve_process_count(0, on_cpu=False) == 2  # 0 = every visible GPU
    assert trainer.resolve_process_count(2, on_cpu=False) == 2
    with pytest.raises(ValueError, match=r"num_processes=4 but this host shows 2 CUDA GPU\(s\)"):
        trainer.resolve_process_count(4, on_cpu=False)
    assert trainer.resolve_process_count(0, on_cpu=True) == 1
    assert trainer.resolve_process_count(4, on_cpu=True) == 4  # gloo on CPU: any count


@pytest.mark.integration
def test_two_training_processes_share_the_epoch_and_keep_one_loadable_checkpoint(features, tmp_path):  # noqa: F811
    """torchrun with two ranks (DDP over gloo on CPU; NCCL on GPUs): each rank trains on its part of
    every epoch, so an epoch takes fewer optimizer steps than in one process, and rank 0 keeps the
    best checkpoint."""
    root, verifier = features
    log = logging.getLogger(__name__)
    work = tmp_path / "work"
    data = build_training_data(root, PARTITIONS, work, log=log)
    vocab = build_draft_vocab(data.path, 64, VOCAB, log=log)
    runs = {}
    for processes in (1, 2):
        settings = TrainingSettings(epochs=1, draft_vocab_size=64, total_seq_len=256, lr=1e-3, num_processes=processes,
                                    early_stop_patience=0, log_every_steps=1)
        runs[processes] = trainer.train(data, vocab, str(verifier), settings, work, log)
    assert runs[1].run_dir != runs[2].run_dir
    assert runs[2].summary["epochs_run"] == 1 and runs[2].summary["val_loss"] > 0
    assert 0 < runs[2].summary["train_steps"] < runs[1].summary["train_steps"]
    model = load_with_speculators(runs[2].best_dir)
    assert model.d2t.shape == (64,)
