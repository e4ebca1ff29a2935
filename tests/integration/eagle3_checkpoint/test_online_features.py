"""``eagle3_checkpoint`` with ``features: online`` for real on CPU: the tiny verifier served by vLLM's
``extract_hidden_states`` with our connector, speculators' own on-missing generation against it, no
``hidden_states`` materialization; the scratch folder stays under its cap and is gone afterwards."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import dagster as dg

from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    HIDDEN_STATES,
    LINEAGE_FILE,
    ONLINE_SCRATCH_PREFIX,
    TOKEN_SEQUENCES,
    WORK_DIR,
    asset_folder,
    current_version,
)
from tests.helpers.features import write_token_sequences
from tests.helpers.upstream import PARTITION

# The small recipe of tests/integration/eagle3_checkpoint/test_asset.py.
TINY_RUN = {"epochs": 2, "draft_vocab_size": 64, "total_seq_len": 256, "log_every_steps": 1}
RUN = "online"
SCRATCH_CAP_GB = 0.001  # 1 MB: a few of the tiny verifier's rows (~150 KB each)


class ScratchPeak(threading.Thread):
    """The most bytes the online scratch folders held at once, sampled every 10 ms."""

    def __init__(self, work: Path):
        super().__init__(daemon=True)
        self.work, self.peak, self.seen = work, 0, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.01):
            held = 0
            for folder in self.work.glob(f"{ONLINE_SCRATCH_PREFIX}*") if self.work.is_dir() else ():
                for entry in os.scandir(folder) if folder.is_dir() else ():
                    try:
                        held += entry.stat().st_size
                    except FileNotFoundError:
                        continue
            self.peak = max(self.peak, held)
            self.seen += held > 0

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _scratch_folders(root: Path) -> list[Path]:
    return list((asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR).glob(f"{ONLINE_SCRATCH_PREFIX}*"))


def _train_online(storage_root, tiny_verifier, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """eagle3_checkpoint (and its checks) with online features, on the real tiny verifier served by vLLM."""
    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.orchestration.partitions import source_partitions

    built = eagle3_checkpoint.build(source_partitions())
    return dg.materialize(
        [*built["assets"], *built["checks"]],
        resources={"storage": storage_root, "verifier": _verifier(tiny_verifier)},
        instance=instance,
        partition_key=RUN,
        run_config={
            "ops": {
                "eagle3_checkpoint": {"config": {**TINY_RUN, "features": "online", "scratch_cap_gb": SCRATCH_CAP_GB}}
            }
        },
        raise_on_error=False,
    )


def _verifier(tiny_verifier):
    from eagle_assets.resources import Verifier

    # The vllm backend builds the server's engine; eager, as the embedded verifier is served.
    return Verifier(model_path=str(tiny_verifier), backend="vllm", device="cpu", engine_args={"enforce_eager": True})


def _instance() -> dg.DagsterInstance:
    from eagle_assets.core.partitions import add_training_run

    instance = dg.DagsterInstance.ephemeral()
    add_training_run(instance, RUN)
    return instance


def test_online_features_train_through_the_real_server(tiny_verifier, storage_root):
    from eagle_assets.eagle3_checkpoint.saved import load_with_speculators

    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=24, steps=3)
    root = Path(storage_root.root)
    verifier, instance = _verifier(tiny_verifier), _instance()
    peak = ScratchPeak(asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR)
    peak.start()
    started = time.monotonic()
    try:
        result = _train_online(storage_root, tiny_verifier, instance)
    finally:
        peak.stop()
    wall_s = time.monotonic() - started
    print(f"online training wall time {wall_s:.1f}s, peak scratch {peak.peak} bytes")
    [materialization] = [e.materialization for e in result.get_asset_materialization_events()]
    meta = {k: v.value for k, v in materialization.metadata.items()}
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    # Two epochs on 24 rows teach the draft too little for the learned check; the others must pass.
    assert checks["loads_with_speculators"] and checks["matches_verifier"], checks

    assert meta["features"] == "online" and meta["generated_rows"] == meta["rows"] > 0
    assert meta["validation_rows"] > 0 and meta["epochs_run"] == 2
    model = load_with_speculators(Path(meta["path"]))
    assert model.d2t.shape == (64,)

    # Every row went through the scratch folder, which never held more than the cap and is gone now.
    assert 0 < peak.peak <= SCRATCH_CAP_GB * 1e9 and peak.seen > 0
    assert not _scratch_folders(root)
    # No hidden_states materialization: neither files nor a Dagster record.
    assert not asset_folder(root, HIDDEN_STATES).exists()
    assert not instance.fetch_materializations(dg.AssetKey(HIDDEN_STATES), limit=1).records

    lineage = json.loads((Path(meta["path"]) / LINEAGE_FILE).read_text())
    online = lineage["hidden_states"][PARTITION]
    assert online["features"] == "online" and online["layer_ids"] == verifier.layer_ids()
    assert online["dtype"] == "bfloat16" and online["vllm_version"] and online["stored"] is None
    assert online["connector"].endswith("CPUSafeHiddenStatesConnector")
    ts_version = current_version(asset_folder(root, TOKEN_SEQUENCES, PARTITION))
    assert online["token_sequences_version"] == ts_version
    assert online["verifier_identity"] == verifier.identity() and len(sequences) >= meta["rows"]


def test_a_server_killed_mid_training_fails_the_run_naming_it(tiny_verifier, storage_root):
    """SIGKILL of the server's process group once the trainer has asked it for rows: the run fails with the
    server's port, exit code and log tail within seconds, not after speculators' retries."""
    from eagle_assets.resources.server_state import ServerFiles, read_state, server_state_dir

    write_token_sequences(storage_root, tiny_verifier, prompts=24, steps=3)
    root = Path(storage_root.root)
    killed: dict = {}

    def kill_once_serving() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            for folder in _scratch_folders(root):
                if any(folder.glob("*.safetensors*")):  # the trainer is generating rows
                    port = int(folder.name.removeprefix(ONLINE_SCRATCH_PREFIX))
                    state = read_state(ServerFiles.on_this_host(server_state_dir(""), "127.0.0.1", port).state)
                    os.killpg(state["pid"], signal.SIGKILL)
                    killed.update(port=port, at=time.monotonic())
            time.sleep(0.01)

    killer = threading.Thread(target=kill_once_serving, daemon=True)
    killer.start()
    result = _train_online(storage_root, tiny_verifier, _instance())
    ended = time.monotonic()
    killer.join(timeout=5)
    assert killed and not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert f"the vLLM server on port {killed['port']}" in message
    assert "exited with exit code -9 while the trainer was using it" in message and "Last lines of" in message
    assert ended - killed["at"] < 60  # speculators alone would retry each row for minutes
    assert not _scratch_folders(root)
