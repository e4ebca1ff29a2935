"""The Dagster code location: ``dagster dev -w workspace.yaml`` loads :data:`defs`."""

from __future__ import annotations

import dagster as dg

from eagle_assets.assets import ASSET_FAMILIES
from eagle_assets.jobs import with_pipeline_jobs
from eagle_assets.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
from eagle_assets.runs.executor import recorded_executor


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Assemble the graph from the plugins registered *now*."""
    partitions = source_partitions()
    assets, checks, jobs = [], [], []
    for family in ASSET_FAMILIES:
        built = family.build(partitions)
        assets += built.get("assets", [])
        checks += built.get("checks", [])
        jobs += built.get("jobs", [])
    return with_pipeline_jobs(dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        executor=recorded_executor,  # records each run's worker; reconciles runs killed on this host
        resources={"storage": StorageRoot(), "verifier": Verifier(), "vllm_server": VLLMServer(), **(resources or {})},
    ))


defs = build_definitions()
