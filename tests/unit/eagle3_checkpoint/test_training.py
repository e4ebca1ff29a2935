"""The eagle3_checkpoint stage without Dagster: partition choice, the recipe refusal, training planning on
random features, and keeping a checkpoint with its training.json and lineage.json (the trainer stubbed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle_assets.backends import VerifierBackend
from eagle_assets.core.files import checkpoint_id, file_sha256, hash_of_model_files, model_file_hashes, publish_version
from eagle_assets.core.layout import HIDDEN_STATES, INDEX_FILE, SEQUENCES_FILE, TOKEN_SEQUENCES, asset_folder
from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.training import (
    CheckpointTrainingError,
    choose_partitions,
    plan_training,
    recipe_changes,
    recipe_refusal,
    train_and_keep,
    training_record,
)
from tests.helpers.features import LAYERS, PARTITIONS, VOCAB
from tests.helpers.logs import Levels

BACKEND = VerifierBackend(name="transformers", description="configs read with transformers")


def features_of(root: Path, partition: str, *, sequences=True, index=True) -> None:
    """Empty current versions of the token_sequences and hidden_states files (only their presence counts)."""
    for present, asset, name in ((sequences, TOKEN_SEQUENCES, SEQUENCES_FILE), (index, HIDDEN_STATES, INDEX_FILE)):
        if present:
            publish_version(asset_folder(root, asset, partition), "0" * 16, lambda tmp, name=name: (tmp / name).touch())


def test_partitions_are_the_requested_ones_or_every_one_with_features(tmp_path):
    known, log = ["demo", "jsonl", "parquet"], Levels()
    with pytest.raises(CheckpointTrainingError, match=r"partitions \['nope'\] are not registered dataset sources"):
        choose_partitions(["demo", "nope"], known, tmp_path, log)
    assert choose_partitions(["parquet"], known, tmp_path, log) == ["parquet"]  # as asked, materialized or not
    with pytest.raises(CheckpointTrainingError, match="no partition has materialized token_sequences and hidden"):
        choose_partitions([], known, tmp_path, log)
    features_of(tmp_path, "demo")
    features_of(tmp_path, "jsonl", index=False)  # no hidden_states yet
    assert choose_partitions([], known, tmp_path, log) == ["demo"]
    assert log.infos[-1] == (
        "partitions without materialized token_sequences/hidden_states, not used: ['jsonl', 'parquet']"
    )


def test_another_recipe_under_a_recorded_training_run_is_refused_with_its_changes():
    recorded = {"lr": 3e-3, "epochs": 3, "partitions": []}
    changes = recipe_changes(recorded, {**recorded, "epochs": 2, "new_setting": 1})
    assert changes == ["epochs: 3 -> 2"]
    refusal = recipe_refusal("lr-3e-3", changes)
    assert refusal.startswith("training run 'lr-3e-3' was trained with another recipe (epochs: 3 -> 2): ")
    assert (
        "`eagle-assets add-training-run NAME`" in refusal and "launch 'lr-3e-3' with its recorded settings" in refusal
    )


def test_planning_lays_out_the_training_folder_and_fills_the_settings_from_the_verifier(random_features, tmp_path):
    root, verifier = random_features
    log = Levels()
    plan = plan_training(root, PARTITIONS, tmp_path / "work", BACKEND, verifier, TrainingSettings(epochs=1), log)
    assert plan.partitions == PARTITIONS and plan.data.num_rows == 24 and plan.data.manifest.layer_ids == LAYERS
    assert plan.data.path.is_relative_to(tmp_path / "work")
    # Unset settings are filled for this verifier, and the plan says how.
    assert set(plan.resolved_from_verifier) == {"lr", "draft_vocab_size", "total_seq_len"}
    assert plan.settings.draft_vocab_size == VOCAB // 2 and plan.settings.epochs == 1
    assert plan.vocab.size == VOCAB // 2 and plan.vocab.d2t_path.exists() and 0 < plan.vocab.coverage <= 1
    assert int(plan.text_config.vocab_size) == VOCAB
    assert [line for line in log.infos if line.startswith("draft_vocab_size unset: ")]
    assert any(line.startswith(f"training data: 24 rows ({plan.data.num_tokens} tokens") for line in log.infos)
    assert log.infos[-1].startswith(f"draft vocabulary: {VOCAB // 2} of {VOCAB} tokens, covering ")

    set_vocab = plan_training(
        root, PARTITIONS, tmp_path / "work", BACKEND, verifier, TrainingSettings(draft_vocab_size=64), Levels()
    )
    assert set_vocab.vocab.size == 64 and "draft_vocab_size" not in set_vocab.resolved_from_verifier


def test_planning_refuses_features_of_another_verifier_and_a_vocabulary_too_large(random_features, tmp_path):
    root, verifier = random_features
    other = shutil.copytree(verifier, tmp_path / "other-verifier")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rope_theta": 12345.0}))
    with pytest.raises(CheckpointTrainingError, match=r"were captured from verifier .* re-materialize hidden_states"):
        plan_training(root, PARTITIONS, tmp_path / "work", BACKEND, other, TrainingSettings(), Levels())
    with pytest.raises(CheckpointTrainingError, match=f"draft_vocab_size={VOCAB} must be between 1 and {VOCAB - 1}"):
        plan_training(
            root, PARTITIONS, tmp_path / "w", BACKEND, verifier, TrainingSettings(draft_vocab_size=VOCAB), Levels()
        )
    with pytest.raises(
        CheckpointTrainingError,
        match=r"token_sequences/missing/versions/unpublished/sequences\.parquet is missing: "
        "materialize token_sequences",
    ):
        plan_training(root, ["missing"], tmp_path / "w", BACKEND, verifier, TrainingSettings(), Levels())


def test_the_kept_checkpoint_holds_its_training_record_and_lineage(random_features, tmp_path, monkeypatch):
    root, verifier = random_features
    plan = plan_training(root, PARTITIONS, tmp_path / "work", BACKEND, verifier, TrainingSettings(), Levels())
    best = tmp_path / "run" / "checkpoints" / "checkpoint_best"
    best.mkdir(parents=True)
    (best / "config.json").write_text('{"speculators_model_type": "eagle3"}')
    (best / "model.safetensors").write_bytes(b"weights")
    (best / "optimizer_state_dict.pt").write_bytes(b"state")  # training state: never kept
    summary = {"best_epoch": 1, "val_loss": 2.5, "epochs_run": 2}
    trained = trainer.TrainerResult(tmp_path / "trainer", best, summary)
    calls = []

    def fake_train(data, vocab, verifier_path, settings, work_root, log, serve=None):
        calls.append((data, vocab, verifier_path, settings, work_root))
        return trained

    monkeypatch.setattr(trainer, "train", fake_train)
    lineage_calls = []

    def lineage_of(training, folder):
        lineage_calls.append((training, folder))
        return {"format": 1, "partitions": PARTITIONS}

    record = dict(training_run="v1", recipe={"epochs": 5}, code_version="eagle3_checkpoint-3", dagster_run_id="abc")
    kept = train_and_keep(
        plan, BACKEND, verifier, tmp_path / "work", tmp_path / "checkpoints", lineage_of, Levels(), **record
    )
    assert calls == [(plan.data, plan.vocab, str(verifier), plan.settings, tmp_path / "work")]
    expected = training_record(plan, trained, backend_name="transformers", model_path=verifier, **record)
    assert kept.training == expected and lineage_calls == [(expected, plan.data.path)]
    assert expected["trainer"] == {"folder": str(tmp_path / "trainer"), "dagster_run_id": "abc"}
    assert expected["data"]["partitions"] == PARTITIONS and expected["metrics"] == summary == kept.summary
    assert expected["data"]["upstream_versions"] == plan.data.upstream_versions != {}
    assert expected["verifier"]["identity"] == BACKEND.identity(verifier) and expected["recipe"] == {"epochs": 5}

    weights = hash_of_model_files(model_file_hashes(best))
    assert kept.digest == checkpoint_id(weights, "v1") and kept.folder.name == kept.digest[:16]
    assert kept.folder.parent == tmp_path / "checkpoints"
    assert sorted(p.name for p in kept.folder.iterdir()) == [
        "config.json",
        "lineage.json",
        "lineage.sha256",
        "model.safetensors",
        "training.json",
    ]
    assert json.loads((kept.folder / "training.json").read_text()) == json.loads(json.dumps(expected, default=str))
    lineage = json.loads((kept.folder / "lineage.json").read_text())
    assert lineage["partitions"] == PARTITIONS and lineage["checkpoint_hash"] == weights
    assert {f["path"] for f in lineage["checkpoint_files"]} == {"config.json", "model.safetensors", "training.json"}
    assert kept.lineage_sha256 == file_sha256(kept.folder / "lineage.json")
    assert kept.lineage == {"format": 1, "partitions": PARTITIONS}
    # The same run keeping the same weights again (another Dagster run) finds them kept: nothing is rewritten.
    files = {p.name: p.read_bytes() for p in kept.folder.iterdir()}
    logs = Levels()
    rerun = record | {"dagster_run_id": "def"}
    work, checkpoints = tmp_path / "work", tmp_path / "checkpoints"
    again = train_and_keep(plan, BACKEND, verifier, work, checkpoints, lineage_of, logs, **rerun)
    assert (again.folder, again.digest, again.lineage_sha256) == (kept.folder, kept.digest, kept.lineage_sha256)
    assert again.training["trainer"]["dagster_run_id"] == "abc" and again.lineage["checkpoint_hash"] == weights
    assert len(lineage_calls) == 1  # no lineage collected for a folder left as it is
    assert {p.name: p.read_bytes() for p in kept.folder.iterdir()} == files
    assert any("was kept by training run 'v1' before" in line for line in logs.infos)
