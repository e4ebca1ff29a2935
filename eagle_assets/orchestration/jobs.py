"""Named jobs, so runs carry a name (not ``__ephemeral_asset_job__``) in the UI's run list and Overview timeline.

Built from whatever graph the definitions hold: one job per stage (``stage_<asset>``), the per-dataset chain
(``dataset``: every asset partitioned by dataset source, for one partition) and the assets that read every
dataset partition (``draft``: the checkpoint and its evaluation, for one named training run). Each job
carries its assets' checks. There is no single whole-graph job: a Dagster job runs one partitions
definition, and the graph has two (dataset sources, training runs); ``dataset`` then ``draft`` is the
whole graph, which is what ``eagle-assets demo`` runs.
"""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.partitions import TRAINING_RUNS

DATASET, DRAFT = "dataset", "draft"


def is_per_training_run(partitions_def: dg.PartitionsDefinition | None) -> bool:
    return isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name == TRAINING_RUNS


def plan(defs: dg.Definitions) -> tuple[list[dg.AssetKey], list[dg.AssetKey]]:
    """(per-dataset, draft) materializable asset keys, each in dependency order: the assets partitioned by
    dataset source, then the rest (per training run, or unpartitioned)."""
    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.toposorted_asset_keys if graph.get(k).is_materializable]
    per_dataset = [
        k
        for k in keys
        if graph.get(k).partitions_def is not None and not is_per_training_run(graph.get(k).partitions_def)
    ]
    return per_dataset, [k for k in keys if k not in per_dataset]


def with_pipeline_jobs(defs: dg.Definitions, loggers: dict[str, dg.LoggerDefinition] | None = None) -> dg.Definitions:
    """``defs`` with the named jobs of its graph (its own other jobs kept) and, if given, these ``loggers``."""
    named = pipeline_jobs(*plan(defs))
    names = {job.name for job in named}
    return dg.Definitions(
        assets=defs.assets,
        asset_checks=defs.asset_checks,
        resources=defs.resources,
        executor=defs.executor,
        loggers=loggers or defs.loggers,
        jobs=[*(job for job in defs.jobs or [] if job.name not in names), *named],
    )


def stage_job_name(key: dg.AssetKey) -> str:
    return f"stage_{key.to_python_identifier()}"


def pipeline_jobs(per_dataset: list[dg.AssetKey], draft: list[dg.AssetKey]) -> list[dg.UnresolvedAssetJobDefinition]:
    """The named jobs over the ``per_dataset`` and ``draft`` asset keys (each in dependency order)."""
    jobs = []
    if per_dataset:
        jobs.append(
            dg.define_asset_job(
                DATASET, selection=per_dataset, description="One dataset partition from prompts to hidden states."
            )
        )
    if draft:
        jobs.append(
            dg.define_asset_job(
                DRAFT,
                selection=draft,
                description="One named training run: the draft trained on every dataset "
                "partition's hidden states, then evaluated.",
            )
        )
    jobs += [
        dg.define_asset_job(stage_job_name(key), selection=[key], description=f"Only {key.to_user_string()}.")
        for key in [*per_dataset, *draft]
    ]
    return jobs
