"""``eagle3_checkpoint`` with ``features: online`` for real on CPU: the tiny verifier served by vLLM's
``extract_hidden_states`` with our connector, speculators' own on-missing generation against it, no
``hidden_states`` materialization; the scratch folder stays under its cap and is gone afterwards; a run
SIGKILLed resumes at its next epoch, and a server killed mid-training fails the run naming it."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import dagster as dg

from benchmarks.scratch_sampler import ScratchSampler
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
from eagle_assets.lineage.verify import verify_lineage
from tests.helpers.features import write_token_sequences
from tests.helpers.online import (
    SCRATCH_CAP_GB,
    online_instance,
    online_verifier,
    scratch_folders,
    train_online,
)
from tests.helpers.processes import kill_group
from tests.helpers.runs import start, wait_until
from tests.helpers.upstream import PARTITION


def test_online_features_train_through_the_real_server_and_resume_after_sigkill(tiny_verifier, storage_root, tmp_path):
    """The run SIGKILLed on its whole process group (as the OOM killer kills it) once its first epoch is saved,
    then run again: the trainer resumes at the next epoch, the killed run's server is stopped and its scratch
    folder removed; the draft loads and matches the verifier, the scratch never held more than the cap."""
    from eagle_assets.eagle3_checkpoint.saved import load_with_speculators
    from eagle_assets.resources.server_process import port_in_use

    sequences = write_token_sequences(storage_root, tiny_verifier, prompts=24, steps=3)
    root = Path(storage_root.root)
    work = asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR
    verifier, instance = online_verifier(tiny_verifier), online_instance()
    with ScratchSampler(work) as peak:
        log = tmp_path / "killed.log"
        killed = start([sys.executable, "-m", "tests.helpers.online", str(root), str(tiny_verifier)], tmp_path, log)
        try:
            wait_until(lambda: list(work.glob("trainer-*/checkpoints/checkpoint_best")), 900, "epoch 1", killed, log)
        finally:
            kill_group(killed)
        [killed_port] = [int(f.name.removeprefix(ONLINE_SCRATCH_PREFIX)) for f in scratch_folders(root)]
        result = train_online(storage_root, tiny_verifier, instance)
    print(f"online training: peak scratch {peak.peak} bytes")
    lines = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("Resuming training on epoch 1." in line for line in lines), "the trainer started over"
    assert not port_in_use("127.0.0.1", killed_port)  # the killed run's server was stopped
    [materialization] = [e.materialization for e in result.get_asset_materialization_events()]
    meta = {k: v.value for k, v in materialization.metadata.items()}
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    # Two epochs on 24 rows teach the draft too little for the learned check; the others must pass.
    assert checks["loads_with_speculators"] and checks["matches_verifier"], checks

    assert meta["features"] == "online" and meta["generated_rows"] == meta["rows"] > 0
    assert meta["server_devices"] == meta["trainer_devices"] == "cpu"  # no GPU to split on this host
    assert meta["validation_rows"] > 0 and meta["epochs_run"] == 2
    model = load_with_speculators(Path(meta["path"]))
    assert model.d2t.shape == (64,)

    # Every row went through the scratch folder, which never held more than the cap and is gone now.
    assert 0 < peak.peak <= SCRATCH_CAP_GB * 1e9 and peak.busy > 0
    assert not scratch_folders(root)
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
    # What exists verifies; the features that never did are named.
    verified = verify_lineage(Path(meta["path"]))
    assert verified.problems == [] and len(verified.notes) == 1, verified
    assert verified.notes[0].startswith(f"hidden_states[{PARTITION}]: features computed online while training")


def test_a_server_killed_mid_training_fails_the_run_naming_it(tiny_verifier, storage_root):
    """FP8 features made online, and SIGKILL of the server's process group once the trainer has trained on
    rows it made: the run fails with the server's port, exit code and log tail within seconds, not after
    speculators' retries."""
    from eagle_assets.resources.server_state import ServerFiles, read_state, server_state_dir

    write_token_sequences(storage_root, tiny_verifier, prompts=24, steps=3)
    root = Path(storage_root.root)
    work = asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR
    killed: dict = {}

    def trained_a_step() -> bool:
        return any('"train"' in metrics.read_text() for metrics in work.glob("trainer-*/metrics.jsonl"))

    def kill_once_serving() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            for folder in scratch_folders(root):
                if trained_a_step():  # on FP8 rows the server made and the loader read
                    port = int(folder.name.removeprefix(ONLINE_SCRATCH_PREFIX))
                    state = read_state(ServerFiles.on_this_host(server_state_dir(""), "127.0.0.1", port).state)
                    os.killpg(state["pid"], signal.SIGKILL)
                    killed.update(port=port, at=time.monotonic())
            time.sleep(0.01)

    killer = threading.Thread(target=kill_once_serving, daemon=True)
    killer.start()
    result = train_online(storage_root, tiny_verifier, online_instance(), feature_dtype="fp8")
    ended = time.monotonic()
    killer.join(timeout=5)
    assert killed and not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert f"the vLLM server on port {killed['port']}" in message
    assert "exited with exit code -9 while the trainer was using it" in message and "Last lines of" in message
    assert ended - killed["at"] < 60  # speculators alone would retry each row for minutes
    assert not scratch_folders(root)
