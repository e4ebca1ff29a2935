"""The ``eagle3_eval`` asset: how many tokens the draft saves, measured by vLLM speculative decoding.

Partitioned like ``eagle3_checkpoint``, by named training run: the verifier is served with the run's
latest checkpoint (or one of its kept checkpoints, ``checkpoint`` in the launchpad) as its EAGLE-3 draft;
held-out prompts (split ``heldout`` of the current ``prompts`` tables; training reads only ``train`` and
``validation``) are sent greedily, and the acceptance length and per-position acceptance come from vLLM's own
spec-decode counters. An out-of-distribution set (the evaluation-only partitions, e.g. ``demo_ood``)
is measured the same way on the same server and reported beside it as ``ood_*``. A held-out prompt
whose problem the checkpoint trained or validated on is never sent (``eagle_assets.eagle3_eval.eval_sets``).
The simulated value of the same draft on the in-distribution greedy outputs (verifier hidden states,
speculators' forward) is recorded too. All use vLLM's convention τ = 1 + accepted / drafts.

Each prompt set's numbers carry its label as a key prefix (``heldout[demo]/acceptance_length``,
``ood[demo_ood]/acceptance_length``): the UI plots one line per key, so a line never joins numbers of
different prompt sets, and training runs are separate partitions.

Dagster wiring only: what to measure is :mod:`~eagle_assets.eagle3_eval.plan`, the measurement and its
report :mod:`~eagle_assets.eagle3_eval.acceptance`.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
from pathlib import Path

import dagster as dg
from pydantic import Field

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, EAGLE3_EVAL, PIPELINE, asset_folder
from eagle_assets.core.partitions import training_runs
from eagle_assets.eagle3_checkpoint.asset import checkpoint_of
from eagle_assets.eagle3_checkpoint.checks import acceptance_check_result
from eagle_assets.eagle3_eval.acceptance import AcceptanceSettings, EvalReport, measure_acceptance
from eagle_assets.eagle3_eval.evaluate import EvaluationError, acceptance_table
from eagle_assets.eagle3_eval.plan import (
    EvalPlanError,
    check_checkpoint,
    evaluation_only_sources,
    named_checkpoint,
    plan_evaluation,
)
from eagle_assets.plugin_manager import dataset_sources
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer

# Bump when the same checkpoint and settings would be measured differently.
CODE_VERSION = "eagle3_eval-3"


class Eagle3EvalConfig(dg.Config):
    """Launchpad settings of `eagle3_eval`."""

    checkpoint: str = Field(
        default="",
        description="Which of the training run's kept checkpoints to evaluate: its folder name (content hash, as "
        "`eagle-assets checkpoints` lists it) or path; empty = the run's latest.",
    )
    num_speculative_tokens: int = Field(default=3, ge=1, description="Draft tokens vLLM proposes per step (K).")
    max_prompts: int = Field(
        default=64,
        ge=1,
        description="Prompts to send per set, in-distribution and out-of-distribution (the "
        "first by prompt id, over the set's partitions).",
    )
    max_tokens: int = Field(default=1024, ge=1, description="Most new tokens per greedy request.")
    partitions: list[str] = Field(
        default_factory=list,
        description="Dataset partitions whose held-out prompts are the in-distribution set; empty = the "
        "checkpoint's training partitions.",
    )
    ood_partitions: list[str] | None = Field(
        default=None,
        description="Evaluation-only partitions (sources registered with evaluation_only, e.g. demo_ood, or your "
        "own eval set) measured as the out-of-distribution set; unset = every one whose prompts are "
        "materialized; [] = none.",
    )
    concurrency: int = Field(default=64, ge=1, description="Requests in flight at once.")
    port: int = Field(
        default=0,
        ge=0,
        description="Port of the speculating server; 0 = vllm_server.port + 1 (a kept-alive generation "
        "server on vllm_server.port stays untouched).",
    )
    simulated: bool = Field(
        default=True, description="Also compute the offline simulated acceptance on the same greedy outputs."
    )
    measure_baseline: bool = Field(
        default=False,
        description="Also serve without the draft (a second server start) to record tokens/s with and without.",
    )
    min_acceptance_length: float = Field(
        default=2.0,
        ge=1.0,
        description="Floor of the acceptance_length check (vLLM-measured τ). 2.0 = at least one draft token "
        "accepted per step on average; the embedded demo's draft reaches about 3.8 at K=3.",
    )


def chosen_checkpoint(instance: dg.DagsterInstance, run: str, storage: StorageRoot, name: str = "") -> Path:
    """The checkpoint folder to serve: ``name`` (a kept folder's name or a path) or the training run's latest.
    It must still exist and belong to ``run``."""
    folder = checkpoint_of(instance, run) if not name else named_checkpoint(name, storage.path(EAGLE3_CHECKPOINT))
    try:
        return check_checkpoint(folder, run)
    except EvalPlanError as err:
        raise dg.Failure(str(err)) from None


def materialize_result(report: EvalReport, run: str, min_acceptance_length: float) -> dg.MaterializeResult:
    """The numbers of every prompt set, their table, and where the report and greedy outputs are."""
    plan = report.plan
    return dg.MaterializeResult(
        metadata={
            **report.numbers,
            "acceptance": dg.MetadataValue.md(acceptance_table(report.numbers, report.labels)),
            "eval_set": plan.label,
            "ood_eval_set": plan.ood_label or "(none)",
            "training_run": run,
            "min_acceptance_length": min_acceptance_length,
            "checkpoint": dg.MetadataValue.path(str(plan.checkpoint)),
            "report": dg.MetadataValue.path(str(report.report_file)),
            "greedy_outputs": dg.MetadataValue.path(str(report.greedy_outputs_file)),
            "partitions": ", ".join(plan.partitions),
            "ood_partitions": ", ".join(plan.ood.partitions) or "(none)",
        },
        data_version=dg.DataVersion(report.data_version),
    )


def build(partitions: dg.PartitionsDefinition) -> dict:
    runs = training_runs()

    @dg.asset(
        name=EAGLE3_EVAL,
        partitions_def=runs,
        deps=[EAGLE3_CHECKPOINT, dg.AssetDep("prompts", partition_mapping=dg.AllPartitionMapping())],
        kinds={"vllm", "speculators"},
        group_name=PIPELINE,
        code_version=CODE_VERSION,
        pool="gpu",
    )
    def eagle3_eval(
        context: dg.AssetExecutionContext,
        config: Eagle3EvalConfig,
        storage: StorageRoot,
        vllm_server: VLLMServer,
        verifier: Verifier,
    ) -> dg.MaterializeResult:
        """Acceptance of a training run's EAGLE-3 draft on held-out and out-of-distribution prompts, measured
        by vLLM speculative decoding.

        Metadata, per prompt set under its label (`heldout[<partitions>]/…`, `ood[<partitions>]/…`):
        `acceptance_length` (τ = 1 + accepted/drafts, vLLM's convention), `acceptance_pos_1..K` (accepted at
        position k / drafts), `simulated_acceptance_length` (in-distribution: the draft's chained proposals
        against the verifier's greedy tokens, same convention), tokens/s, `excluded_trained` (held-out
        prompts left out because the checkpoint trained or validated on their problem); `acceptance` is
        the table of all sets, `checkpoint` the folder evaluated.
        """
        run = context.partition_key
        checkpoint = chosen_checkpoint(context.instance, run, storage, config.checkpoint)
        try:
            plan = plan_evaluation(
                checkpoint,
                Path(storage.root),
                partitions=config.partitions,
                known_partitions=partitions.get_partition_keys(),
                ood_requested=config.ood_partitions,
                evaluation_only=evaluation_only_sources(dataset_sources()),
                max_prompts=config.max_prompts,
                log=context.log,
            )
        except EvalPlanError as err:
            raise dg.Failure(str(err)) from None
        settings = AcceptanceSettings(
            num_speculative_tokens=config.num_speculative_tokens,
            max_tokens=config.max_tokens,
            concurrency=config.concurrency,
            port=config.port or vllm_server.port + 1,
            measure_baseline=config.measure_baseline,
        )
        try:
            report = measure_acceptance(
                plan,
                settings,
                vllm_server,
                verifier if config.simulated else None,
                asset_folder(storage.root, EAGLE3_EVAL),
                context.log,
                training_run=run,
                config=config.model_dump(),
                dagster_run_id=context.run.run_id,
            )
        except EvaluationError as err:
            raise dg.Failure(str(err)) from err
        return materialize_result(report, run, config.min_acceptance_length)

    @dg.asset_check(
        asset=eagle3_eval,
        partitions_def=runs,
        description="vLLM-measured acceptance length on the "
        "in-distribution held-out set is at least the configured floor (min_acceptance_length of the "
        "evaluation run).",
    )
    def acceptance_length_above_floor(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(EAGLE3_EVAL), asset_partitions=[context.partition_key]), limit=1
        ).records
        return acceptance_check_result(
            context.partition_key,
            {k: v.value for k, v in records[0].asset_materialization.metadata.items()} if records else None,
        )

    return {"assets": [eagle3_eval], "checks": [acceptance_length_above_floor]}
