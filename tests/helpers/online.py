"""``eagle3_checkpoint`` with ``features: online`` on the tiny verifier, for the tests: the run (in this
process, or as ``python -m tests.helpers.online STORAGE_ROOT VERIFIER`` in one of its own, for a test that
SIGKILLs it), and a sampler of the scratch folders' bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, ONLINE_SCRATCH_PREFIX, WORK_DIR, asset_folder

# The small recipe of tests/integration/eagle3_checkpoint/test_asset.py.
TINY_RUN = {"epochs": 2, "draft_vocab_size": 64, "total_seq_len": 256, "log_every_steps": 1}
RUN = "online"
SCRATCH_CAP_GB = 0.001  # 1 MB: a few of the tiny verifier's rows (~150 KB each)


def scratch_folders(root: Path) -> list[Path]:
    return list((asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR).glob(f"{ONLINE_SCRATCH_PREFIX}*"))


def train_online(
    storage_root, tiny_verifier, instance: dg.DagsterInstance, feature_dtype: str = "bfloat16"
) -> dg.ExecuteInProcessResult:
    """eagle3_checkpoint (and its checks) of training run ``RUN`` with online features, on the real tiny
    verifier served by vLLM."""
    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.orchestration.partitions import source_partitions

    built = eagle3_checkpoint.build(source_partitions())
    return dg.materialize(
        [*built["assets"], *built["checks"]],
        resources={"storage": storage_root, "verifier": online_verifier(tiny_verifier, feature_dtype)},
        instance=instance,
        partition_key=RUN,
        run_config={
            "ops": {
                "eagle3_checkpoint": {"config": {**TINY_RUN, "features": "online", "scratch_cap_gb": SCRATCH_CAP_GB}}
            }
        },
        raise_on_error=False,
    )


def online_verifier(tiny_verifier, feature_dtype: str = "bfloat16"):
    from eagle_assets.resources import Verifier

    # The vllm backend builds the server's engine; eager, as the embedded verifier is served.
    return Verifier(
        model_path=str(tiny_verifier),
        backend="vllm",
        device="cpu",
        feature_dtype=feature_dtype,
        engine_args={"enforce_eager": True},
    )


def online_instance() -> dg.DagsterInstance:
    from eagle_assets.core.partitions import add_training_run

    instance = dg.DagsterInstance.ephemeral()
    add_training_run(instance, RUN)
    return instance


if __name__ == "__main__":
    from eagle_assets.resources import StorageRoot

    result = train_online(StorageRoot(root=sys.argv[1]), sys.argv[2], online_instance())
    sys.exit(0 if result.success else 1)
