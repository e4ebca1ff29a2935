"""Extraction workers (one process per device) for real: two CPU workers on the tiny verifier; GPU hosts
run the very same code with ``cuda:N`` devices."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_assets.backends import ExtractionRequest
from eagle_assets.core.files import file_sha256
from eagle_assets.hidden_states.files import SampleWriter, check_sample, load_sample
from eagle_assets.hidden_states.parallel import ExtractionWorkerFailed, extract_on_devices
from eagle_assets.plugin_manager import pm
from tests.helpers.features import (
    folder,
    index_path,
    manifest,
    materialize_hidden_states,
    metadata,
    verifier_for,
    write_token_sequences,
)
from tests.helpers.processes import kill_group
from tests.helpers.worker_backends import PoisonedPlugin, VanishingBackend

TWO_CPU_WORKERS = ["cpu", "cpu"]


def written_state(root):
    """What a hidden_states run leaves: index rows, tensor files by name and hash, the manifest."""
    files = {p.name: file_sha256(p) for p in sorted((folder(root) / "tensors").iterdir())}
    return pq.read_table(index_path(root)).to_pylist(), files, manifest(root)


def test_two_cpu_workers_write_exactly_what_one_process_writes(storage_root, tiny_verifier, tmp_path):
    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=12, steps=3)
    distinct = len(set(map(tuple, sequences["input_ids"].to_pylist())))
    # One row per forward pass (batch_tokens=1): the numbers cannot depend on which rows share a batch,
    # so the two layouts must agree to the bit.
    single = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=1))
    assert single.success and metadata(single)["extraction_workers"] == 1
    expected = written_state(storage_root)
    shutil.move(folder(storage_root), tmp_path / "single")

    parallel = materialize_hidden_states(
        storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS)
    )
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
    resumed = materialize_hidden_states(
        storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS)
    )
    assert resumed.success
    assert metadata(resumed)["files_written"] == len(removed)
    assert written_state(storage_root) == expected


def test_a_failing_worker_fails_the_step_with_its_error_and_keeps_whole_files(storage_root, tiny_verifier):
    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=12, steps=3)
    rows = [tuple(ids) for ids in sequences["input_ids"].to_pylist()]
    # The rarest token: few rows fail, so the other worker has good rows to write before it is stopped.
    token = min(Counter(t for ids in set(rows) for t in set(ids)).items(), key=lambda kv: (kv[1], kv[0]))[0]
    plugin = PoisonedPlugin(token)
    pm.register(plugin, name="poisoned-backend-test-plugin")
    try:
        failed = materialize_hidden_states(
            storage_root, verifier_for(tiny_verifier, backend="poisoned", batch_tokens=1, devices=TWO_CPU_WORKERS)
        )
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
    assert not index_path(storage_root).exists()  # nothing published

    kept = sorted((folder(storage_root) / "tensors").glob("*.safetensors"))
    for path in kept:  # whatever either worker renamed into place is whole and right
        sample = load_sample(path)
        assert tuple(sample["token_ids"].tolist()) in set(rows) and token not in sample["token_ids"].tolist()
        check_sample(sample["hidden_states"], sample["token_ids"], 4, sample["hidden_states"].shape[-1], path.name)

    fixed = materialize_hidden_states(
        storage_root, verifier_for(tiny_verifier, batch_tokens=1, devices=TWO_CPU_WORKERS)
    )
    assert fixed.success
    meta = metadata(fixed)
    assert meta["files_reused"] == len(kept) and meta["files_written"] == len(set(rows)) - len(kept)
    assert not list((folder(storage_root) / "tensors").glob(".*.tmp"))  # stopped workers' temporaries cleared


def test_a_killed_worker_is_reported_with_its_device_and_signal(tiny_verifier, tmp_path):
    backend = VanishingBackend(name="vanishing", description="killed at start")
    request = ExtractionRequest(sequences=[((0, "a" * 32), [1, 2, 3]), ((1, "b" * 32), [4, 5])], layer_ids=[1, 2, 4])
    with pytest.raises(ExtractionWorkerFailed, match=r"extraction worker \d on cpu was killed by signal 9"):
        extract_on_devices(backend, tiny_verifier, request, TWO_CPU_WORKERS, SampleWriter(tmp_path, 3, 64))


PARENT_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.helpers.worker_backends import HangingBackend
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
    return "; ".join(
        line
        for line in lines
        if line.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    )


def test_workers_end_when_the_step_process_is_killed(tiny_verifier, tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, str(Path(__file__).parents[3]), str(tmp_path), str(tiny_verifier)]
    )
    try:
        deadline = time.monotonic() + 300
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
        workers = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
        assert len(workers) == 2, "the workers never started"
        kill_group(parent)  # as a killed Dagster step process: no finally blocks run
        # The parent-death SIGTERM ends them at once, even when this pytest process ignores SIGTERM and they
        # inherited that (the margin is for a heavily loaded host).
        deadline = time.monotonic() + 180
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = {pid: _proc_status(pid) for pid in workers if _alive(pid)}
        assert not survivors, f"workers outlived their killed parent by 180 s: {survivors}"
    finally:
        kill_group(parent)
