"""The training path: data folder, draft vocabulary, CPU training through Dagster, checkpoint checks."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.core.files import write_parquet
from eagle_assets.eagle3_checkpoint.saved import verifier_mismatches
from eagle_assets.eagle3_checkpoint.training_data import FeatureManifest, TrainingDataError, build_training_data
from eagle_assets.eagle3_checkpoint.synthetic import write_head_only_verifier, write_random_features
from eagle_assets.eagle3_checkpoint.vocab import DraftVocabError, build_draft_vocab

VOCAB, HIDDEN, LAYERS = 512, 64, [1, 2, 3, 4]
PARTITIONS = ["demo", "jsonl"]


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    """Random features for two partitions in the storage layout, and a head-only 4-layer verifier."""
    from transformers import Qwen3Config

    base = tmp_path_factory.mktemp("features")
    verifier = write_head_only_verifier(base / "verifier", Qwen3Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, intermediate_size=128, max_position_embeddings=1024, eos_token_id=1))
    root = base / "storage"
    for seed, partition in enumerate(PARTITIONS):
        write_random_features(root, partition, verifier_path=verifier, layer_ids=LAYERS, hidden_size=HIDDEN,
                              vocab_size=VOCAB, num_rows=12, seq_len=(40, 120), seed=seed, validation_fraction=0.25)
    return root, verifier


def _copy_storage(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_training_folder_links_tensors_and_speculators_reads_it(features, tmp_path):
    from speculators.train.data import ArrowDataset

    root, _ = features
    data = build_training_data(root, PARTITIONS, tmp_path / "work")
    assert data.num_rows == 24 and data.manifest.aux_layer_ids == [1, 2, 3]
    links = sorted((data.path / "hidden_states").iterdir())
    assert len(links) == 24
    for link in links:
        # A link into the hidden_states asset's own tensor folder: nothing copied.
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.resolve().parent.parent.parent == (root / "hidden_states").resolve()
    dataset = ArrowDataset(max_len=256, datapath=str(data.path), on_missing="raise")
    for i in (0, len(dataset) - 1):
        sample = dataset[i]
        assert sample["hidden_states"].shape == (sample["input_ids"].shape[0], 3 * HIDDEN)
    # token_freq.pt counts exactly the loss-mask-1 tokens of the rows used.
    rows = {r["prompt_id"] for r in pq.read_table(data.path / "rows.parquet").to_pylist()}
    expected: dict[int, int] = {}
    for partition in PARTITIONS:
        for r in pq.read_table(root / "token_sequences" / partition / "sequences.parquet").to_pylist():
            if r["prompt_id"] in rows:
                for token, m in zip(r["input_ids"], r["loss_mask"], strict=True):
                    if m:
                        expected[token] = expected.get(token, 0) + 1
    assert torch.load(data.path / "token_freq.pt") == expected
    # Same inputs => the same folder, not rebuilt.
    stamp = (data.path / "rows.parquet").stat().st_mtime_ns
    again = build_training_data(root, PARTITIONS, tmp_path / "work")
    assert again.path == data.path and (data.path / "rows.parquet").stat().st_mtime_ns == stamp


def test_the_validation_split_is_the_tail_speculators_validates_on(features, tmp_path):
    from speculators.train.data import ArrowDataset

    from eagle_assets.prompts.splits import read_current_splits

    root, _ = features
    data = build_training_data(root, PARTITIONS, tmp_path / "work")
    rows = pq.read_table(data.path / "rows.parquet").to_pylist()
    n_val = data.num_validation_rows
    assert 0 < n_val < data.num_rows == len(rows)
    assert [r["split"] for r in rows] == ["train"] * (data.num_rows - n_val) + ["validation"] * n_val
    current = {pid: split for p in PARTITIONS for pid, (split, _) in read_current_splits(root, p).items()}
    assert all(current[r["prompt_id"]] == r["split"] for r in rows)  # the prompts table's labels, not others
    val = ArrowDataset(max_len=256, datapath=str(data.path), on_missing="raise",
                       train_ratio=data.train_data_ratio, split="val")
    assert len(val) == n_val


def test_synthetic_features_have_the_assets_schemas_and_load_without_dagster(features):
    import subprocess

    from eagle_assets.hidden_states.files import INDEX_SCHEMA
    from eagle_assets.token_sequences.build import SEQUENCES_SCHEMA

    root, _ = features
    assert pq.read_schema(root / "token_sequences" / "demo" / "sequences.parquet") == SEQUENCES_SCHEMA
    assert pq.read_schema(root / "hidden_states" / "demo" / "index.parquet") == INDEX_SCHEMA
    # Benchmarks write features with it outside any code location: Dagster must stay out of its imports.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, eagle_assets.eagle3_checkpoint.synthetic; print('dagster' in sys.modules)"],
        capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


def test_training_folder_rejects_inconsistent_features(features, tmp_path):
    root = _copy_storage(features[0], tmp_path / "storage")
    with pytest.raises(TrainingDataError, match="materialize token_sequences for partition 'missing'"):
        build_training_data(root, ["missing"], tmp_path / "work")
    index_path = root / "hidden_states" / "demo" / "index.parquet"
    index = pq.read_table(index_path)
    wrong = index.set_column(index.schema.get_field_index("seq_len"), "seq_len",
                             [[v + 1 for v in index["seq_len"].to_pylist()]])
    write_parquet(wrong.cast(index.schema), index_path)
    with pytest.raises(TrainingDataError, match=r"disagree on seq_len .* demo/"):
        build_training_data(root, ["demo"], tmp_path / "work")


def test_draft_vocab_from_frequencies(tmp_path):
    torch.save({7: 50, 3: 40, 9: 30, 1: 1}, tmp_path / "token_freq.pt")
    vocab = build_draft_vocab(tmp_path, 3, 16)
    d2t, t2d = np.load(vocab.d2t_path), np.load(vocab.t2d_path)
    assert (np.arange(3) + d2t).tolist() == [3, 7, 9]  # the three most frequent, in id order
    assert t2d.shape == (16,) and np.nonzero(t2d)[0].tolist() == [3, 7, 9]
    assert vocab.coverage == pytest.approx(120 / 121)
    for too_large in (17, 16):  # the whole vocabulary too: vLLM loads d2t/t2d only for a smaller draft vocabulary
        with pytest.raises(DraftVocabError, match="between 1 and 15, below the verifier's vocab size 16"):
            build_draft_vocab(tmp_path, too_large, 16)
    torch.save({20: 5}, tmp_path / "token_freq.pt")
    with pytest.raises(DraftVocabError, match="outside the verifier vocabulary"):
        build_draft_vocab(tmp_path, 3, 16)
    (tmp_path / "token_freq.pt").unlink()
    with pytest.raises(DraftVocabError, match="token_freq.pt is missing"):
        build_draft_vocab(tmp_path, 3, 16)


KIMI_TEXT_CONFIG = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840,
                    "max_position_embeddings": 262144}


def test_training_defaults_resolve_from_a_kimi_shaped_verifier(tmp_path):
    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND
    from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k25", "text_config": KIMI_TEXT_CONFIG,
                                                      "vision_config": {"hidden_size": 1152}}))
    shape = VerifierShape.of(KIMI_BACKEND.text_config(tmp_path))
    assert shape == VerifierShape(vocab_size=163840, context_length=262144)
    settings, resolved = resolve_settings(TrainingSettings(), shape)  # speculators' recipe, read from speculators
    assert settings.total_seq_len >= 8192  # a whole 8K-token reasoning sample fits one row
    assert settings.draft_vocab_size == 32000 and settings.lr == 1e-3
    assert set(resolved) == {"total_seq_len", "draft_vocab_size", "lr"}
    assert "speculators' 32000" in resolved["draft_vocab_size"]


def test_training_defaults_for_the_tiny_verifier_and_explicit_settings(tiny_verifier):
    from eagle_assets.plugins.transformers_backend import TRANSFORMERS_BACKEND
    from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings

    recipe = {"lr": 1e-3, "total_seq_len": 8192, "draft_vocab_size": 32000}
    shape = VerifierShape.of(TRANSFORMERS_BACKEND.text_config(tiny_verifier))
    settings, _ = resolve_settings(TrainingSettings(), shape, recipe)
    assert settings.draft_vocab_size == shape.vocab_size // 2 < 32000  # a 1K vocabulary: half of it, not 32K
    assert settings.total_seq_len <= shape.context_length
    # A short-context verifier: rows never exceed what it can attend to.
    short, _ = resolve_settings(TrainingSettings(), VerifierShape(vocab_size=128256, context_length=4096), recipe)
    assert short.total_seq_len == 4096 and short.draft_vocab_size == 32000
    # Explicit settings win, and nothing is reported as resolved.
    demo = TrainingSettings(total_seq_len=512, draft_vocab_size=256, lr=3e-3)
    assert resolve_settings(demo, shape, recipe) == (demo, {})


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
    from eagle_assets.orchestration.partitions import add_training_run

    instance = dg.DagsterInstance.ephemeral()
    add_training_run(instance, run)
    return instance


@pytest.mark.integration
def test_checkpoint_asset_trains_on_cpu_and_checks_what_it_learned(features, tmp_path):
    """Two epochs on CPU through dg.materialize; the kept checkpoint loads in speculators and matches the
    verifier, but random tokens and features teach nothing: the learned check fails (and blocks)."""
    from eagle_assets.eagle3_checkpoint.saved import load_with_speculators

    root = _copy_storage(features[0], tmp_path / "storage")
    assets, checks = _definitions_parts()
    instance = _instance_with_run()
    resources = _resources(root, features[1])
    result = dg.materialize([*assets, *checks], instance=instance, resources=resources, raise_on_error=False,
                            partition_key=RUN, run_config={"ops": {"eagle3_checkpoint": {"config": TINY_RUN}}})
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
    manifest_path = root / "hidden_states" / "demo" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "layer_ids": [0, 2, 3, 4]}))
    # The training run's checks alone (dg.materialize takes no partition_key for a checks-only selection).
    rerun = dg.materialize([*assets, *checks], instance=instance, resources=resources, tags={"dagster/partition": RUN},
                           selection=dg.AssetSelection.checks(*checks), raise_on_error=False)
    assert not rerun.success  # the check is blocking: downstream assets would not run
    evaluations = {e.check_name: e for e in rerun.get_asset_check_evaluations()}
    assert evaluations["loads_with_speculators"].passed
    assert evaluations["loads_with_speculators"].metadata["problems"].value == "none"
    assert not evaluations["matches_verifier"].passed
    assert "aux layer ids [1, 2, 3] differ" in evaluations["matches_verifier"].metadata["problems"].value


@pytest.fixture(scope="module")
def one_epoch_checkpoint(features, tmp_path_factory) -> dict:
    """The materialization metadata of a one-epoch checkpoint made by the asset on the demo partition
    (shared: the tests below only read its folder or copy it)."""
    root = _copy_storage(features[0], tmp_path_factory.mktemp("one-epoch") / "storage")
    assets, _ = _definitions_parts()
    result = dg.materialize(assets, resources=_resources(root, features[1]), instance=_instance_with_run(),
                            partition_key=RUN, run_config={"ops": {"eagle3_checkpoint": {"config": {**TINY_RUN, "epochs": 1,
                                                                                 "partitions": ["demo"]}}}})
    return result.get_asset_materialization_events()[0].materialization.metadata


@pytest.mark.integration
def test_mismatched_hidden_size_or_vocab_maps_are_reported(features, one_epoch_checkpoint):
    """verifier_mismatches names each disagreement; run on a checkpoint produced by the asset."""
    folder = Path(one_epoch_checkpoint["path"].value)
    manifest = FeatureManifest.read(Path(features[0]) / "hidden_states" / "demo")
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


@pytest.mark.integration
def test_the_speculators_load_check_names_a_broken_checkpoint(features, one_epoch_checkpoint, tmp_path):
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
    assert any("lacks draft weights" in p for p in broken("missing", lambda t: {k: v for k, v in t.items()
                                                                                if k != weight}))
    assert any("non-finite" in p for p in broken("nan", lambda t: {**t, weight: t[weight] * float("nan")}))
    every_token = broken("t2d", lambda t: {**t, "t2d": torch.ones_like(t["t2d"])})
    assert any("t2d" in p for p in every_token), every_token


# 23 train rows of short arithmetic, first-proposal validation accuracy (most frequent token: 0.104):
# 1 epoch at lr 1e-3 0.018 and 4 epochs at lr 3e-3 0.165 (the learned check failed both); 8 epochs at
# lr 3e-3 0.074/0.13/0.18/0.22/0.25/0.26/0.26/0.263 per epoch.
LEARNING_RUN = {**TINY_RUN, "epochs": 8, "lr": 3e-3, "min_val_accuracy": 0.2}


@pytest.mark.integration
def test_checkpoint_from_the_real_upstream_assets_of_the_tiny_verifier(tiny_verifier, storage_root):
    """prompts -> (stored reasoning samples) -> token_sequences -> hidden_states -> eagle3_checkpoint,
    every asset the real one, on the embedded tiny verifier; the checks pass."""
    from transformers import AutoTokenizer

    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.token_sequences import asset as token_sequences
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import Verifier
    from upstream_rows import PARTITION, demo_prompts, sample_row, write_samples

    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    prompts = demo_prompts(storage_root, limit=24, validation_fraction=0.25, heldout_fraction=0.1)
    write_samples(storage_root, [sample_row(p, tokenizer, steps=3) for p in prompts])
    partitions = source_partitions()
    features = [*token_sequences.build(partitions)["assets"], *hidden_states.build(partitions)["assets"]]
    resources = {"storage": storage_root, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu")}
    assert dg.materialize(features, partition_key=PARTITION, resources=resources).success
    built = eagle3_checkpoint.build(partitions)
    result = dg.materialize([*built["assets"], *built["checks"]], resources=resources, instance=_instance_with_run(),
                            partition_key=RUN, run_config={"ops": {"eagle3_checkpoint": {"config": LEARNING_RUN}}})
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
    from upstream_rows import PARTITION, demo_prompts

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


def test_capacity_plan_metadata_that_cannot_be_made_is_a_warning_not_a_failure(features):
    """The checkpoint is kept before its plan metadata is made: a verifier config the plan cannot read
    leaves the metadata out with a warning instead of failing the run."""
    from transformers import PretrainedConfig, Qwen3Config

    from eagle_assets.eagle3_checkpoint.asset import plan_metadata

    class Warnings(list):
        def warning(self, line):
            self.append(line)

    root, verifier = features
    manifest = FeatureManifest.read(root / "hidden_states" / "demo")
    text_config = Qwen3Config.from_pretrained(verifier)
    log = Warnings()
    made = plan_metadata(root, ["demo"], manifest, verifier, text_config, log)
    assert made["plan/bytes"] > 0 and not log
    assert plan_metadata(root, ["demo"], manifest, verifier, PretrainedConfig(), log) == {}
    assert len(log) == 1 and "the checkpoint is kept: ShapeError" in log[0] and "lacks" in log[0]


def test_a_streamed_process_is_stopped_once_the_caller_has_what_it_needs(tmp_path):
    from eagle_assets.eagle3_checkpoint.trainer import run_streaming

    class Lines:
        def __init__(self):
            self.lines = []

        def info(self, line):
            self.lines.append(line)

    log = Lines()
    endless = [sys.executable, "-c", "import itertools, time\nfor i in itertools.count():\n    print(i, flush=True)\n"
               "    time.sleep(0.01)"]
    run_streaming(endless, log, cwd=tmp_path, done=lambda: "3" in log.lines)
    assert log.lines == ["0", "1", "2", "3"]
