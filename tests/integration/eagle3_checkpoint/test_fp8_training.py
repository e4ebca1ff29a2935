"""A real CPU training run on FP8 hidden states of the tiny verifier."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


def test_a_draft_trains_on_fp8_features_of_the_tiny_verifier(tiny_verifier, storage_root):
    """token_sequences -> hidden_states (fp8) -> eagle3_checkpoint with the real speculators trainer on
    CPU, reading the files through its own fp8 backend; the checks pass and lineage records fp8."""
    from transformers import AutoTokenizer

    from eagle_assets.core.partitions import add_training_run
    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.lineage.record import read_lineage
    from eagle_assets.lineage.render import summary_lines
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import Verifier
    from eagle_assets.token_sequences import asset as token_sequences
    from tests.helpers.upstream import PARTITION, demo_prompts, sample_row, write_samples

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
    result = dg.materialize(
        [*built["assets"], *built["checks"]],
        resources=resources,
        instance=instance,
        partition_key="fp8",
        raise_on_error=False,
        run_config={
            "ops": {"eagle3_checkpoint": {"config": {"epochs": 1, "draft_vocab_size": 64, "total_seq_len": 256}}}
        },
    )
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
