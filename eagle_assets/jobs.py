"""Named jobs, so runs carry a name (not ``__ephemeral_asset_job__``) in the UI's run list and Overview timeline.

Built from whatever graph the definitions hold: one job per stage (``stage_<asset>``), the per-dataset chain
(``dataset``: every partitioned asset, for one partition), the assets that read every partition (``draft``:
the checkpoint and its evaluation) and ``whole_graph``. Each job carries its assets' checks.
"""

from __future__ import annotations

import dagster as dg

WHOLE_GRAPH, DATASET, DRAFT = "whole_graph", "dataset", "draft"


def plan(defs: dg.Definitions) -> tuple[list[dg.AssetKey], list[dg.AssetKey]]:
    """(partitioned, unpartitioned) materializable asset keys, each in dependency order."""
    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.toposorted_asset_keys if graph.get(k).is_materializable]
    partitioned = [k for k in keys if graph.get(k).partitions_def is not None]
    return partitioned, [k for k in keys if k not in partitioned]


def with_pipeline_jobs(defs: dg.Definitions, loggers: dict[str, dg.LoggerDefinition] | None = None) -> dg.Definitions:
    """``defs`` with the named jobs of its graph (its own other jobs kept) and, if given, these ``loggers``."""
    named = pipeline_jobs(*plan(defs))
    names = {job.name for job in named}
    return dg.Definitions(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources,
                          executor=defs.executor, loggers=loggers or defs.loggers,
                          jobs=[*(job for job in defs.jobs or [] if job.name not in names), *named])


def stage_job_name(key: dg.AssetKey) -> str:
    return f"stage_{key.to_python_identifier()}"


def pipeline_jobs(partitioned: list[dg.AssetKey], unpartitioned: list[dg.AssetKey]) -> list[dg.UnresolvedAssetJobDefinition]:
    """The named jobs over ``partitioned`` (per-dataset, in dependency order) and ``unpartitioned`` asset keys."""
    jobs = [dg.define_asset_job(WHOLE_GRAPH, selection=[*partitioned, *unpartitioned],
                                description="Every asset: the per-dataset stages for the chosen partition, then the "
                                            "draft trained and evaluated over all partitions.")]
    if partitioned:
        jobs.append(dg.define_asset_job(DATASET, selection=partitioned,
                                        description="One dataset partition from prompts to hidden states."))
    if unpartitioned:
        jobs.append(dg.define_asset_job(DRAFT, selection=unpartitioned,
                                        description="The draft trained on every partition's hidden states, "
                                                    "then evaluated."))
    jobs += [dg.define_asset_job(stage_job_name(key), selection=[key], description=f"Only {key.to_user_string()}.")
             for key in [*partitioned, *unpartitioned]]
    return jobs
