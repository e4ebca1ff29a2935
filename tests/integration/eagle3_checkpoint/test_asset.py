"""``eagle3_checkpoint`` trained for real on CPU through Dagster (the speculators trainer in a child
process): on random features, and on the real upstream assets of the tiny verifier; its checks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.core.layout import current_folder
from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest
from eagle_assets.eagle3_checkpoint.saved import verifier_mismatches
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from tests.helpers.features import HIDDEN, PARTITIONS, VOCAB, copy_storage


def _definitions_parts():
    from eagle_assets.eagle3_checkpoint import asset as family

    built = family.build(dg.StaticPartitionsDefinition([*PARTITIONS, "unmaterialized"]))
    return built["assets"], built["checks"]


def _resources(root: Path, verifier: Path) -> dict:
    from eagle_assets.resources import StorageRoot, Verifier

    return {"storage": StorageRoot(root=str(root)), "verifier": Verifier(model_path=str(verifier))}


TINY_RUN = {"epochs": 2, "draft_vocab_size": 64, "total_seq_len": 256, "log_every_steps": 1}
RUN = "tiny"


def _instance_with_run(run: str = RUN) -> dg.DagsterInstance:
    """An ephemeral instance that knows the training run ``run`` (the checkpoint's partition)."""
    from eagle_assets.core.partitions import add_training_run

    instance = dg.DagsterInstance.ephemeral()
    add_training_run(instance, run)
    return instance


def test_checkpoint_asset_trains_on_cpu_and_checks_what_it_learned(random_features, tmp_path):
    """Two epochs on CPU through dg.materialize; the kept checkpoint loads in speculators and matches the
    verifier, but random tokens and features teach nothing: the learned check fails (and blocks)."""
    from eagle_assets.eagle3_checkpoint.saved import load_with_speculators

    root = copy_storage(random_features[0], tmp_path / "storage")
    assets, checks = _definitions_parts()
    instance = _instance_with_run()
    resources = _resources(root, random_features[1])
    result = dg.materialize(
        [*assets, *checks],
        instance=instance,
        resources=resources,
        raise_on_error=False,
        partition_key=RUN,
        run_config={"ops": {"eagle3_checkpoint": {"config": TINY_RUN}}},
    )
    meta = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["partitions"] == "demo, jsonl" and meta["rows"] == 24 and meta["draft_vocab_size"] == 64
    assert meta["epochs_run"] == 2 and meta["tokens_per_s"] > 0
    assert meta["training_run"] == RUN and meta["recipe"]["epochs"] == 2 and meta["recipe"]["partitions"] == []
    assert meta["val_full_acc_0"] < meta["min_val_accuracy"] == 0.5
    evaluations = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert evaluations == {"loads_with_speculators": True, "learned": False, "matches_verifier": True}
    assert not result.success  # blocking: nothing downstream would have run

    folder = Path(meta["path"])
    config = json.loads((folder / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert {"model.safetensors", "training.json"} <= {p.name for p in folder.iterdir()}
    model = load_with_speculators(folder)
    assert model.d2t.shape == (64,) and model.t2d.shape == (VOCAB,) and int(model.t2d.sum()) == 64

    # A verifier captured at other layers no longer matches the kept checkpoint: the check fails.
    manifest_path = current_folder(root / "hidden_states" / "demo") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "layer_ids": [0, 2, 3, 4]}))
    # The training run's checks alone (dg.materialize takes no partition_key for a checks-only selection).
    rerun = dg.materialize(
        [*assets, *checks],
        instance=instance,
        resources=resources,
        tags={"dagster/partition": RUN},
        selection=dg.AssetSelection.checks(*checks),
        raise_on_error=False,
    )
    assert not rerun.success  # the check is blocking: downstream assets would not run
    evaluations = {e.check_name: e for e in rerun.get_asset_check_evaluations()}
    assert evaluations["loads_with_speculators"].passed
    assert evaluations["loads_with_speculators"].metadata["problems"].value == "none"
    assert not evaluations["matches_verifier"].passed
    assert "aux layer ids [1, 2, 3] differ" in evaluations["matches_verifier"].metadata["problems"].value


@pytest.fixture(scope="module")
def one_epoch_checkpoint(random_features, tmp_path_factory) -> dict:
    """The materialization metadata of a one-epoch checkpoint made by the asset on the demo partition
    (shared: the tests below only read its folder or copy it)."""
    root = copy_storage(random_features[0], tmp_path_factory.mktemp("one-epoch") / "storage")
    assets, _ = _definitions_parts()
    result = dg.materialize(
        assets,
        resources=_resources(root, random_features[1]),
        instance=_instance_with_run(),
        partition_key=RUN,
        run_config={"ops": {"eagle3_checkpoint": {"config": {**TINY_RUN, "epochs": 1, "partitions": ["demo"]}}}},
    )
    return result.get_asset_materialization_events()[0].materialization.metadata


def test_mismatched_hidden_size_or_vocab_maps_are_reported(random_features, one_epoch_checkpoint):
    """verifier_mismatches names each disagreement; run on a checkpoint produced by the asset."""
    folder = Path(one_epoch_checkpoint["path"].value)
    manifest = FeatureManifest.read(Path(random_features[0]) / "hidden_states" / "demo")
    facts = {"hidden_size": HIDDEN, "num_hidden_layers": 4, "vocab_size": VOCAB}
    assert verifier_mismatches(folder, facts, manifest) == []
    wrong_size = dataclasses.replace(manifest, hidden_size=2 * HIDDEN)
    assert any("hidden sizes differ" in p for p in verifier_mismatches(folder, facts, wrong_size))
    wrong_final = dataclasses.replace(manifest, layer_ids=[1, 2, 3, 5])
    assert any("not the verifier's last" in p for p in verifier_mismatches(folder, facts, wrong_final))
    # A verifier with another vocabulary: t2d no longer covers it.
    other_vocab = {**facts, "vocab_size": 2 * VOCAB}
    assert any("t2d has shape" in p for p in verifier_mismatches(folder, other_vocab, manifest))
    # The kept folder carries its lineage and training record.
    assert {"lineage.json", "training.json"} <= {p.name for p in folder.iterdir()}
    # Its run records the capacity plan of its stage, like every asset.
    assert one_epoch_checkpoint["plan/bytes_bf16"].value > 0 and "plan/gpu_hours" in one_epoch_checkpoint


def test_the_speculators_load_check_names_a_broken_checkpoint(random_features, one_epoch_checkpoint, tmp_path):
    """speculators_load_problems on a real checkpoint, then on copies with a draft weight removed, a
    non-finite weight, and vocab maps that no longer fit."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle_assets.eagle3_checkpoint.saved import speculators_load_problems

    folder = Path(one_epoch_checkpoint["path"].value)
    problems, facts = speculators_load_problems(folder)
    assert problems == [] and facts["draft_vocab_size"] == 64 and facts["verifier_vocab_size"] == VOCAB
    tensors = load_file(str(folder / "model.safetensors"))

    def broken(name: str, change) -> list[str]:
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        save_file(change(dict(tensors)), str(copy / "model.safetensors"))
        return speculators_load_problems(copy)[0]

    weight = next(k for k in tensors if k.startswith("fc."))
    assert any(
        "lacks draft weights" in p for p in broken("missing", lambda t: {k: v for k, v in t.items() if k != weight})
    )
    assert any("non-finite" in p for p in broken("nan", lambda t: {**t, weight: t[weight] * float("nan")}))
    every_token = broken("t2d", lambda t: {**t, "t2d": torch.ones_like(t["t2d"])})
    assert any("t2d" in p for p in every_token), every_token


# 23 train rows of short arithmetic, first-proposal validation accuracy (most frequent token: 0.104):
# 1 epoch at lr 1e-3 0.018 and 4 epochs at lr 3e-3 0.165 (the learned check failed both); 8 epochs at
# lr 3e-3 0.074/0.13/0.18/0.22/0.25/0.26/0.26/0.263 per epoch.
LEARNING_RUN = {**TINY_RUN, "epochs": 8, "lr": 3e-3, "min_val_accuracy": 0.2}


def test_checkpoint_from_the_real_upstream_assets_of_the_tiny_verifier(tiny_verifier, storage_root):
    """prompts -> (stored reasoning samples) -> token_sequences -> hidden_states -> eagle3_checkpoint,
    every asset the real one, on the embedded tiny verifier; the checks pass."""
    from transformers import AutoTokenizer

    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import Verifier
    from eagle_assets.token_sequences import asset as token_sequences
    from tests.helpers.upstream import PARTITION, demo_prompts, sample_row, write_samples

    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    prompts = demo_prompts(storage_root, limit=24, validation_fraction=0.25, heldout_fraction=0.1)
    write_samples(storage_root, [sample_row(p, tokenizer, steps=3) for p in prompts])
    partitions = source_partitions()
    features = [*token_sequences.build(partitions)["assets"], *hidden_states.build(partitions)["assets"]]
    resources = {"storage": storage_root, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu")}
    assert dg.materialize(features, partition_key=PARTITION, resources=resources).success
    built = eagle3_checkpoint.build(partitions)
    result = dg.materialize(
        [*built["assets"], *built["checks"]],
        resources=resources,
        instance=_instance_with_run(),
        partition_key=RUN,
        run_config={"ops": {"eagle3_checkpoint": {"config": LEARNING_RUN}}},
    )
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    train_rows = sum(p["split"] == "train" for p in prompts)
    validation_rows = sum(p["split"] == "validation" for p in prompts)
    assert meta["partitions"].value == PARTITION and meta["rows"].value == train_rows + validation_rows
    assert meta["validation_rows"].value == validation_rows > 0
    checkpoint = Path(meta["path"].value)
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(tiny_verifier)
    _resplit_never_evaluates_a_trained_prompt(storage_root, checkpoint, prompts)


def _resplit_never_evaluates_a_trained_prompt(storage_root, checkpoint: Path, before: list[dict]) -> None:
    """heldout_fraction raised after capture and training: prompts the checkpoint trained or validated
    on are now labelled heldout, yet eagle3_eval's selection leaves every one out, and a training folder
    built from the same (unchanged) token_sequences/hidden_states takes only the current train rows."""
    from eagle_assets.eagle3_eval.eval_sets import heldout_set, trained_on
    from tests.helpers.upstream import PARTITION, demo_prompts

    after = demo_prompts(storage_root, limit=24, validation_fraction=0.25, heldout_fraction=0.6)
    trained = trained_on(checkpoint)
    moved = {p["prompt_id"] for p in after if p["split"] == "heldout"} & trained.prompt_ids
    assert moved  # the re-split did put trained prompts into heldout
    chosen = heldout_set("in-distribution", Path(storage_root.root), [PARTITION], 64, trained)
    assert chosen.requests and chosen.excluded_trained == len(moved)
    assert not {r.prompt_id for r in chosen.requests} & trained.prompt_ids
    assert {r.prompt_id for r in chosen.requests} <= {p["prompt_id"] for p in before if p["split"] == "heldout"}
    rebuilt = build_training_data(Path(storage_root.root), [PARTITION], Path(storage_root.root) / "rebuilt")
    rows = pq.read_table(rebuilt.path / "rows.parquet")["prompt_id"].to_pylist()
    assert not set(rows) & {p["prompt_id"] for p in after if p["split"] == "heldout"}
