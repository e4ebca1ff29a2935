"""The ``hidden_states`` asset SIGKILLed mid-extraction (a process of its own on the tiny verifier), then
materialized again: every file under a final name is whole, the finished ones are reused as they are and the
half-written temporary is gone."""

from __future__ import annotations

import signal
import subprocess
import sys

import pyarrow.parquet as pq

from eagle_assets.core.files import file_sha256
from eagle_assets.hidden_states.files import check_sample, load_sample
from tests.helpers.features import (
    folder,
    index_path,
    materialize_hidden_states,
    metadata,
    verifier_for,
    write_token_sequences,
)
from tests.helpers.processes import kill_group
from tests.helpers.runs import wait_until
from tests.helpers.upstream import PARTITION

KILLED_RUN = """
import sys
import dagster as dg
from eagle_assets.hidden_states import asset as hidden_states
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier
dg.materialize(hidden_states.build(source_partitions())["assets"], partition_key=sys.argv[3],
               resources={"storage": StorageRoot(root=sys.argv[1]),
                          "verifier": Verifier(model_path=sys.argv[2], device="cpu", batch_tokens=256)})
"""


def test_resume_after_kill_leaves_no_corrupt_file(storage_root, tiny_verifier, tmp_path):
    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=60, steps=40)
    tensors = folder(storage_root) / "tensors"
    log = tmp_path / "killed-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, storage_root.root, str(tiny_verifier), PARTITION],
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def files_appeared() -> bool:
        """Files in place, preferably while one is half-written (a temporary exists)."""
        names = [p.name for p in tensors.iterdir()] if tensors.exists() else []
        finished = sum(n.endswith(".safetensors") for n in names)
        return finished > 0 and (any(n.endswith(".tmp") for n in names) or finished >= 5)

    try:
        wait_until(files_appeared, 300, "the first hidden-state files", proc, log, poll_s=0.002)
    finally:
        kill_group(proc)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill: {log.read_text()[-3000:]}"
    finished = sorted(tensors.glob("*.safetensors"))
    distinct = len(set(map(tuple, sequences["input_ids"].to_pylist())))
    assert 0 < len(finished) < distinct
    by_tokens = {tuple(ids) for ids in sequences["input_ids"].to_pylist()}
    for path in finished:  # everything under a final name is whole and valid
        sample = load_sample(path)
        assert tuple(sample["token_ids"].tolist()) in by_tokens
        check_sample(sample["hidden_states"], sample["token_ids"], 4, sample["hidden_states"].shape[-1], path.name)
    before = {p.name: p.stat().st_mtime_ns for p in finished}

    result = materialize_hidden_states(storage_root, verifier_for(tiny_verifier, batch_tokens=256))
    assert result.success
    meta = metadata(result)
    assert meta["files_reused"] == len(finished) and meta["files_written"] == distinct - len(finished)
    assert not list(tensors.glob(".*.tmp"))  # the killed run's half-written temporary is gone
    assert {p.name: p.stat().st_mtime_ns for p in finished} == before  # finished files were not rewritten
    for row in pq.read_table(index_path(storage_root)).to_pylist():
        assert file_sha256(folder(storage_root) / row["file"]) == row["sha256"]
