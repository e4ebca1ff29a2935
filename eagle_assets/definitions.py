"""The Dagster code location: ``dagster dev -w workspace.yaml`` loads :data:`defs`."""

from __future__ import annotations

import dagster as dg

from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
from eagle_assets.eagle3_eval import asset as eagle3_eval
from eagle_assets.hidden_states import asset as hidden_states
from eagle_assets.orchestration.executor import recorded_executor
from eagle_assets.orchestration.jobs import with_pipeline_jobs
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
from eagle_assets.token_sequences import asset as token_sequences

# The graph, in pipeline order. Each stage's ``asset.build(partitions)`` returns its Dagster definitions:
# factories rather than module-level assets, so the partitions follow the plugin registry.
ASSET_FAMILIES = (prompts, reasoning_samples, token_sequences, hidden_states, eagle3_checkpoint, eagle3_eval)


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Assemble the graph from the plugins registered *now*."""
    partitions = source_partitions()
    assets, checks, jobs = [], [], []
    for family in ASSET_FAMILIES:
        built = family.build(partitions)
        assets += built.get("assets", [])
        checks += built.get("checks", [])
        jobs += built.get("jobs", [])
    return with_pipeline_jobs(
        dg.Definitions(
            assets=assets,
            asset_checks=checks,
            jobs=jobs,
            executor=recorded_executor,  # records each run's worker; reconciles runs killed on this host
            resources={
                "storage": StorageRoot(),
                "verifier": Verifier(),
                "vllm_server": VLLMServer(),
                **(resources or {}),
            },
        )
    )


defs = build_definitions()
