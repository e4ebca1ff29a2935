"""The eagle3_checkpoint asset's parts that need no training run."""

from __future__ import annotations

from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest


def test_capacity_plan_metadata_that_cannot_be_made_is_a_warning_not_a_failure(random_features):
    """The checkpoint is kept before its plan metadata is made: a verifier config the plan cannot read
    leaves the metadata out with a warning instead of failing the run."""
    from transformers import PretrainedConfig, Qwen3Config

    from eagle_assets.eagle3_checkpoint.asset import plan_metadata

    class Warnings(list):
        def warning(self, line):
            self.append(line)

    root, verifier = random_features
    manifest = FeatureManifest.read(root / "hidden_states" / "demo")
    text_config = Qwen3Config.from_pretrained(verifier)
    log = Warnings()
    made = plan_metadata(root, ["demo"], manifest, verifier, text_config, log)
    assert made["plan/bytes"] > 0 and not log
    assert plan_metadata(root, ["demo"], manifest, verifier, PretrainedConfig(), log) == {}
    assert len(log) == 1 and "the checkpoint is kept: ShapeError" in log[0] and "lacks" in log[0]
