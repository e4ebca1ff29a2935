"""The named training runs: a dynamic partition that keys ``eagle3_checkpoint`` and ``eagle3_eval``."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg

from eagle_assets.core.layout import EAGLE3_CHECKPOINT

TRAINING_RUNS = "training_runs"
# Dagster keeps any string, but a run name is also a CLI argument and part of metadata keys and file names.
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def training_runs() -> dg.DynamicPartitionsDefinition:
    """Named training runs (``demo``, ``kimi-k25-v1``, ...): added from the UI's launchpad or with
    ``eagle-assets add-training-run``; each keeps its own checkpoints, evaluations and history."""
    return dg.DynamicPartitionsDefinition(name=TRAINING_RUNS)


def add_training_run(instance: dg.DagsterInstance, name: str) -> bool:
    """Register the training run ``name`` in ``instance``; False when it existed already."""
    if not _RUN_NAME.fullmatch(name):
        raise ValueError(
            f"training run name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (e.g. demo, kimi-k25-v1)"
        )
    if instance.has_dynamic_partition(TRAINING_RUNS, name):
        return False
    instance.add_dynamic_partitions(TRAINING_RUNS, [name])
    return True


def recent_materializations(
    instance: dg.DagsterInstance, asset: str, run: str, limit: int
) -> list[dg.AssetMaterialization]:
    """The latest ``limit`` materializations of ``asset`` (one keyed by training run) for the training run
    ``run``, newest first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[run]), limit=limit
    ).records
    return [record.asset_materialization for record in records]


def plain_metadata(materialization: dg.AssetMaterialization) -> dict:
    """A materialization's metadata as plain values (each ``MetadataValue``'s ``value``)."""
    return {k: v.value for k, v in materialization.metadata.items()}


def latest_metadata(instance: dg.DagsterInstance, asset: str, run: str) -> dict | None:
    """The metadata of the latest materialization of ``asset`` (one keyed by training run) for the training
    run ``run``, as plain values; None before the first."""
    latest = recent_materializations(instance, asset, run, limit=1)
    return plain_metadata(latest[0]) if latest else None


def latest_checkpoint(instance: dg.DagsterInstance, run: str) -> Path:
    """The folder of the training run ``run``'s latest kept checkpoint (its ``path`` metadata)."""
    metadata = latest_metadata(instance, EAGLE3_CHECKPOINT, run)
    if metadata is None:
        raise dg.Failure(
            f"training run {run!r} has no {EAGLE3_CHECKPOINT} yet: materialize {EAGLE3_CHECKPOINT} "
            f"for partition {run!r} first"
        )
    return Path(metadata["path"])
