"""FP8 hidden states end to end: the training folder, speculators' fp8 reader, a real CPU training run."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from eagle_assets.eagle3_checkpoint.training_data import TrainingDataError, build_training_data
from eagle_assets.eagle3_checkpoint.synthetic import write_head_only_verifier, write_random_features

HIDDEN, LAYERS = 64, [1, 2, 3, 4]


def head_only_verifier(folder: Path) -> Path:
    from transformers import Qwen3Config

    return write_head_only_verifier(folder, Qwen3Config(
        vocab_size=256, hidden_size=HIDDEN, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, intermediate_size=128, max_position_embeddings=1024, eos_token_id=1))


def test_fp8_training_folder_reads_back_through_speculators_and_never_mixes_dtypes(tmp_path):
    """Same rows in bf16 and fp8: separate training folders; speculators' fp8 backend dequantizes
    them close to the bf16 states; a file whose dtype disagrees with the manifest is refused."""
    import torch
    from hs_connectors import HiddenStatesBackend
    from speculators.train.data import ArrowDataset

    from eagle_assets.hidden_states.files import TRAINER_BACKENDS

    verifier = head_only_verifier(tmp_path / "verifier")
    built = {}
    for dtype in ("bfloat16", "fp8"):
        root = tmp_path / dtype
        write_random_features(root, "demo", verifier_path=verifier, layer_ids=LAYERS, hidden_size=HIDDEN,
                              vocab_size=256, num_rows=6, seq_len=(20, 40), feature_dtype=dtype)
        built[dtype] = build_training_data(root, ["demo"], tmp_path / "work")
    assert built["bfloat16"].path != built["fp8"].path  # the dtype is part of the folder's content hash
    loaded = {}
    for dtype, data in built.items():
        transfer = HiddenStatesBackend.registry[TRAINER_BACKENDS[dtype]].from_train_args(
            type("Args", (), {"hidden_states_path": None})(), str(data.path))
        dataset = ArrowDataset(max_len=64, datapath=str(data.path), transfer=transfer, on_missing="raise")
        loaded[dtype] = dataset[0]["hidden_states"].float()
    assert loaded["fp8"].shape == loaded["bfloat16"].shape == (loaded["fp8"].shape[0], 3 * HIDDEN)
    error = (loaded["fp8"] - loaded["bfloat16"]).norm() / loaded["bfloat16"].norm()
    assert 0 < error < 0.05  # e4m3 (3 mantissa bits, per-token scale) on random normal states
    assert torch.isfinite(loaded["fp8"]).all()

    manifest = tmp_path / "fp8" / "hidden_states" / "demo" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "dtype": "bfloat16"}))
    with pytest.raises(TrainingDataError, match="holds fp8 hidden states but manifest.json says bfloat16"):
        build_training_data(tmp_path / "fp8", ["demo"], tmp_path / "work-2")


@pytest.mark.integration
def test_a_draft_trains_on_fp8_features_of_the_tiny_verifier(tiny_verifier, storage_root):
    """token_sequences -> hidden_states (fp8) -> eagle3_checkpoint with the real speculators trainer on
    CPU, reading the files through its own fp8 backend; the checks pass and lineage records fp8."""
    from transformers import AutoTokenizer
    from upstream_rows import PARTITION, demo_prompts, sample_row, write_samples

    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.token_sequences import asset as token_sequences
    from eagle_assets.lineage import read_lineage, summary_lines
    from eagle_assets.orchestration.partitions import add_training_run, source_partitions
    from eagle_assets.resources import Verifier

    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    prompts = demo_prompts(storage_root, limit=16, validation_fraction=0.25, heldout_fraction=0.1)
    write_samples(storage_root, [sample_row(p, tokenizer, steps=3) for p in prompts])
    partitions = source_partitions()
    features = [*token_sequences.build(partitions)["assets"], *hidden_states.build(partitions)["assets"]]
    verifier = Verifier(model_path=str(tiny_verifier), device="cpu", feature_dtype="fp8")
    resources = {"storage": storage_root, "verifier": verifier}
    assert dg.materialize(features, partition_key=PARTITION, resources=resources).success
    built = eagle3_checkpoint.build(partitions)
    instance = dg.DagsterInstance.ephemeral()
    add_training_run(instance, "fp8")
    # One epoch on 16 prompts trains too little to learn (benchmarks/fp8_features.py measures that on
    # the demo): the checks here are that the checkpoint loads and matches the verifier.
    result = dg.materialize([*built["assets"], *built["checks"]], resources=resources, instance=instance,
                            partition_key="fp8", raise_on_error=False, run_config={"ops": {"eagle3_checkpoint": {"config": {
                                "epochs": 1, "draft_vocab_size": 64, "total_seq_len": 256}}}})
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["loads_with_speculators"] and checks["matches_verifier"]
    [materialization] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in materialization.materialization.metadata.items()}
    assert meta["epochs_run"] == 1 and meta["val_loss"] > 0
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("--hidden-states-backend fp8" in line for line in logs)
    assert any("validation epoch 0" in line for line in logs)  # speculators trained and validated
    checkpoint = Path(meta["path"])
    lineage = read_lineage(checkpoint)
    assert lineage["hidden_states"][PARTITION]["dtype"] == "fp8"
    assert any("dtype fp8" in line for line in summary_lines(lineage, checkpoint))
