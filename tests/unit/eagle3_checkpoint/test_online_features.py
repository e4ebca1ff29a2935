"""``features: online`` without a server: the trainer's flags, which rows link a stored file, the scratch
cap's refusal and the connector's wait for room (vLLM's own writer, no engine)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.capacity.plan import FILE_OVERHEAD_BYTES
from eagle_assets.core.layout import HIDDEN_STATES, SCRATCH_CAP_ERROR_FILE, asset_folder
from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest, TrainingDataError
from eagle_assets.eagle3_checkpoint.online_features import check_scratch_cap, largest_row_bytes
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.trainer import speculators_flags
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.vocab import DraftVocab
from eagle_assets.hidden_states.vllm_engine import kv_transfer_config, serve_flags
from tests.helpers.features import copy_storage

URL = "http://127.0.0.1:8123/v1"


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _manifest(root: Path, partition: str = "demo") -> FeatureManifest:
    return FeatureManifest.read(asset_folder(root, HIDDEN_STATES, partition))


def test_online_training_asks_the_server_for_missing_rows_and_stored_never_does(random_features, tmp_path):
    root, _ = random_features
    data = build_training_data(root, ["demo"], tmp_path / "work")
    vocab = DraftVocab(tmp_path / "d2t.npy", tmp_path / "t2d.npy", 64, 100, 0.9, 0.1)
    settings = TrainingSettings(total_seq_len=256, draft_vocab_size=64, lr=1e-3)
    args = (settings, data, vocab, str(random_features[1]), tmp_path / "save", True)
    stored = speculators_flags(*args)
    assert _flag(stored, "--on-missing") == "raise" and "--vllm-endpoint" not in stored
    online = speculators_flags(*args, endpoint=URL)
    assert _flag(online, "--on-missing") == "generate" and _flag(online, "--vllm-endpoint") == URL
    assert [a for a in online if a not in ("--vllm-endpoint", URL)] == [
        "generate" if a == "raise" else a for a in stored
    ]


def test_online_rows_link_the_stored_files_that_exist_and_keep_the_rest(random_features, tmp_path):
    root = copy_storage(random_features[0], tmp_path / "storage")
    manifest = _manifest(root)
    stored = build_training_data(root, ["demo"], tmp_path / "work")
    full = build_training_data(root, ["demo"], tmp_path / "work", online=manifest)
    assert full.online and full.generated_rows == 0 and full.num_rows == stored.num_rows
    assert full.path != stored.path  # an online folder is never a stored one reused

    # A partly stored dataset: the rows whose files are gone are generated, the others keep their link.
    rows = pq.read_table(full.path / "rows.parquet").to_pylist()
    removed = {rows[i]["file"] for i in (0, 3, 5)}
    for rel in removed:
        (asset_folder(root, HIDDEN_STATES, "demo") / rel).unlink()
    partial = build_training_data(root, ["demo"], tmp_path / "work", online=manifest)
    assert partial.generated_rows == len(removed) and partial.path != full.path
    table = pq.read_table(partial.path / "rows.parquet").to_pylist()
    for i, row in enumerate(table):
        link = partial.path / "hidden_states" / f"hs_{i}.safetensors"
        assert link.is_symlink() == (row["file"] is not None)
        assert (row["file"] is None) == (row["content_id"] in {Path(f).stem for f in removed})
    assert partial.num_rows == stored.num_rows  # stored features would have left those rows out

    # Files of another capture (here: other layers) are never linked: every row is generated.
    other = dataclasses.replace(manifest, layer_ids=[0, 2, 3, 4])
    elsewhere = build_training_data(root, ["demo"], tmp_path / "work", online=other)
    assert elsewhere.generated_rows == elsewhere.num_rows
    assert not list((elsewhere.path / "hidden_states").iterdir())


def test_online_rows_need_token_sequences_only(random_features, tmp_path):
    root = copy_storage(random_features[0], tmp_path / "storage")
    manifest = _manifest(root)
    import shutil

    shutil.rmtree(asset_folder(root, HIDDEN_STATES))
    data = build_training_data(root, ["demo", "jsonl"], tmp_path / "work", online=manifest)
    assert data.generated_rows == data.num_rows == 24 and data.num_validation_rows > 0
    with pytest.raises(TrainingDataError, match="materialize hidden_states for partition 'demo'"):
        build_training_data(root, ["demo"], tmp_path / "work")


def test_a_scratch_cap_below_the_longest_rows_features_is_refused(random_features):
    manifest = _manifest(random_features[0])  # 4 layers x 64, bf16
    needed = largest_row_bytes(120, manifest)
    assert needed == 120 * (4 * 64 * 2 + 8) + FILE_OVERHEAD_BYTES
    check_scratch_cap(needed, 120, manifest)
    with pytest.raises(TrainingDataError, match=rf"below the features of the longest row \(120 tokens: {needed} "):
        check_scratch_cap(needed - 1, 120, manifest)


def test_the_connector_config_carries_the_cap_and_serves_as_flags(tmp_path):
    config = kv_transfer_config(tmp_path, "fp8", 5_000_000, 30)
    assert config["kv_connector"] == "FP8CPUSafeHiddenStatesConnector"
    assert config["kv_connector_extra_config"] == {
        "shared_storage_path": str(tmp_path),
        "scratch_cap_bytes": 5_000_000,
        "scratch_wait_s": 30.0,
    }
    assert "scratch_cap_bytes" not in kv_transfer_config(tmp_path)["kv_connector_extra_config"]
    flags = serve_flags({"model": "m", "enable_prefix_caching": False, "enforce_eager": True, "kv": {"a": 1}})
    assert flags == ["--model", "m", "--no-enable-prefix-caching", "--enforce-eager", "--kv", '{"a": 1}']


class _Config:
    def __init__(self, extra: dict):
        self.extra = extra

    def get_from_extra_config(self, key, default):
        return self.extra.get(key, default)


def _capped_writer(cap: int, wait_s: float):
    """The connector's cap over vLLM's own file writer, without an engine."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
    )

    from eagle_assets.hidden_states.vllm_connector import _ScratchCapMixin

    class Writer:
        _write_tensors = staticmethod(ExampleHiddenStatesConnector._write_tensors)

        def __init__(self):
            self._kv_transfer_config = _Config({"scratch_cap_bytes": cap, "scratch_wait_s": wait_s})

    class Capped(_ScratchCapMixin, Writer):
        pass

    return Capped()


class _Done:
    def synchronize(self):
        return None


def _sample(tokens: int) -> dict:
    return {"hidden_states": torch.zeros(tokens, 4, 64, dtype=torch.bfloat16), "token_ids": torch.arange(tokens)}


def test_the_connector_waits_for_room_under_the_cap_then_fails_naming_it(tmp_path):
    from eagle_assets.hidden_states.vllm_connector import ScratchCapError

    one = 100 * (4 * 64 * 2 + 8) + FILE_OVERHEAD_BYTES  # a 100-token file, as the cap counts it
    writer = _capped_writer(cap=one + one // 2, wait_s=5)
    first = tmp_path / "a.safetensors"
    writer._write_tensors(_sample(100), _Done(), str(first), None)
    assert 0 < first.stat().st_size <= one

    # A second file waits until the reader deletes the first.
    threading.Timer(0.5, first.unlink).start()
    started = time.monotonic()
    writer._write_tensors(_sample(100), _Done(), str(tmp_path / "b.safetensors"), None)
    assert time.monotonic() - started >= 0.4 and not first.exists()

    # Nobody frees room: the write fails after the wait, names the cap, leaves the note and releases its lock.
    impatient = _capped_writer(cap=one + one // 2, wait_s=0.3)
    lock = os.open(tmp_path / "c.safetensors.lock", os.O_CREAT | os.O_WRONLY)
    with pytest.raises(ScratchCapError, match=rf"scratch cap {one + one // 2} bytes: c.safetensors"):
        impatient._write_tensors(_sample(100), _Done(), str(tmp_path / "c.safetensors"), lock)
    assert not (tmp_path / "c.safetensors").exists()
    assert "scratch_cap_gb" in (tmp_path / SCRATCH_CAP_ERROR_FILE).read_text()
    with pytest.raises(OSError):
        os.close(lock)  # already closed by the connector
    assert json.dumps(kv_transfer_config(tmp_path, scratch_cap_bytes=1))  # JSON-able, as vLLM's flag needs


def test_a_problem_the_watch_names_stops_the_trainer_with_it(tmp_path):
    import sys

    from eagle_assets.eagle3_checkpoint.trainer import TrainingFailed, run_streaming
    from tests.helpers.logs import Levels

    started = time.monotonic()
    reason = "the vLLM server on port 1234 (pid 1) exited with exit code -9 while the trainer was using it"
    with pytest.raises(TrainingFailed, match=r"training stopped: the vLLM server on port 1234 .* exit code -9"):
        run_streaming(
            [sys.executable, "-c", "import time; print('step', flush=True); time.sleep(60)"],
            Levels(),
            cwd=tmp_path,
            watch=lambda: reason if time.monotonic() - started > 1 else None,
        )
    assert time.monotonic() - started < 30


def test_scratch_folders_of_servers_that_are_gone_are_removed(tmp_path):
    """A killed run's scratch folder goes at the next online run; a live server's, and the run's own, stay."""
    import logging
    import socket

    from eagle_assets.core.layout import ONLINE_SCRATCH_PREFIX
    from eagle_assets.eagle3_checkpoint.online_features import remove_stale_scratch
    from eagle_assets.resources.server_process import free_port

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live_port = listening.getsockname()[1]
        gone, live, own = (tmp_path / f"{ONLINE_SCRATCH_PREFIX}{port}" for port in (free_port(), live_port, 1))
        for folder in (gone, live, own):
            (folder / "left.safetensors").parent.mkdir(parents=True)
            (folder / "left.safetensors").write_bytes(b"x")
        (tmp_path / "trainer-0").mkdir()
        remove_stale_scratch(tmp_path, keep=own, log=logging.getLogger("test"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, own.name, "trainer-0"])
