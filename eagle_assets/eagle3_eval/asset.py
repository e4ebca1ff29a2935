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

``suites`` adds registered evaluation suites (MT-Bench, GSM8K, HumanEval, MATH-500, AIME, or a plugin's), each
measured on the same server and recorded with its name and version. The server answers each request with its
own speculative-decoding statistics: one row per request goes to ``requests.parquet``, and from it τ per set
and category with a bootstrap interval, along the output, inside the thinking and in the answer, and the worst
prompts; the server-wide counters stay as the cross-check. An optional sweep serves the held-out prompts with
each K of a list and without the draft, and names the fastest K here.

Each prompt set's numbers carry its label as a key prefix (``heldout[demo]/acceptance_length``,
``ood[demo_ood]/acceptance_length``): the UI plots one line per key, so a line never joins numbers of
different prompt sets, and training runs are separate partitions.

Dagster wiring only: what to measure is :mod:`~eagle_assets.eagle3_eval.plan`, the measurement and its
report :mod:`~eagle_assets.eagle3_eval.acceptance`, when a stored one is reused
:mod:`~eagle_assets.eagle3_eval.reuse`, the metadata :mod:`~eagle_assets.eagle3_eval.result`, the checks'
verdicts :mod:`~eagle_assets.eagle3_eval.checks`.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
from dataclasses import replace
from pathlib import Path

import dagster as dg
from pydantic import Field

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, EAGLE3_EVAL, PIPELINE, asset_folder, named_checkpoint
from eagle_assets.core.partitions import latest_checkpoint, latest_metadata, training_runs
from eagle_assets.eagle3_eval.acceptance import AcceptanceSettings, measure_acceptance
from eagle_assets.eagle3_eval.checks import acceptance_check_result, counters_check_result
from eagle_assets.eagle3_eval.evaluate import EvaluationError
from eagle_assets.eagle3_eval.per_request import AGREEMENT
from eagle_assets.eagle3_eval.plan import (
    EvalPlanError,
    check_checkpoint,
    evaluation_only_sources,
    plan_evaluation,
)
from eagle_assets.eagle3_eval.result import materialize_result, stored_measurement
from eagle_assets.eagle3_eval.reuse import measurement_key
from eagle_assets.eagle3_eval.suite_sets import (
    DEFAULT_SUITES,
    HELDOUT_SUITE,
    OOD_SUITE,
    SuiteError,
    check_suite_names,
    dataset_set,
    registered_sets,
)
from eagle_assets.plugin_manager import dataset_sources, eval_suites
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer

# Bump when the same checkpoint and settings would be measured differently.
CODE_VERSION = "eagle3_eval-4"


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
    suites: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SUITES),
        description="The prompt sets measured, each reported under its own label: 'heldout' (the run's held-out "
        "prompts; required), 'ood' (the out-of-distribution set) and registered eval suites by name (mt_bench, "
        "gsm8k, humaneval, math500, aime, or a plugin's; an unknown name fails listing them), max_prompts each.",
    )
    suite_locations: dict[str, str] = Field(
        default_factory=dict,
        description="Where a registered suite's rows are read from, by suite name: a Hugging Face hub id "
        "(id@revision pins one) or a local copy of the same shape (a .parquet/.jsonl/.json file or a folder of "
        "them, e.g. the hub dataset downloaded for an offline cluster); unset = the suite's hub dataset.",
    )
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
    sweep_num_speculative_tokens: list[int] = Field(
        default_factory=list,
        description="K values to sweep (e.g. [1, 2, 3, 4, 5]): the first sweep_max_prompts held-out prompts are "
        "served with each K and without the draft (a server start each), τ and tokens/s per K, and the K that "
        "decodes fastest on this host is named; [] = no sweep. Managed servers only.",
    )
    sweep_max_prompts: int = Field(default=16, ge=1, description="Held-out prompts served per K of the sweep.")
    reuse: bool = Field(
        default=True,
        description="Reuse the stored measurement when nothing it depends on changed (the checkpoint, the prompt "
        "sets, these settings, the managed server's launch and served weights, vLLM's version); false measures "
        "again. A systemd or external server is always measured.",
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
    folder = latest_checkpoint(instance, run) if not name else named_checkpoint(name, storage.path(EAGLE3_CHECKPOINT))
    try:
        return check_checkpoint(folder, run)
    except EvalPlanError as err:
        raise dg.Failure(str(err)) from None


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
        the table of all sets, `checkpoint` the folder evaluated, `measured_in_run` the run that measured it (an
        evaluation nothing changed reuses the stored measurement: `reuse` in the launchpad).
        """
        run = context.partition_key
        checkpoint = chosen_checkpoint(context.instance, run, storage, config.checkpoint)
        root = Path(storage.root)
        registered = eval_suites()
        try:
            check_suite_names(config.suites, registered)
            plan = plan_evaluation(
                checkpoint,
                root,
                partitions=config.partitions,
                known_partitions=partitions.get_partition_keys(),
                ood_requested=config.ood_partitions if OOD_SUITE in config.suites else [],
                evaluation_only=evaluation_only_sources(dataset_sources()),
                max_prompts=config.max_prompts,
                log=context.log,
            )
            sets = [dataset_set(plan.label, HELDOUT_SUITE, root, plan.partitions, plan.heldout.requests)]
            if plan.ood_label:
                sets.append(dataset_set(plan.ood_label, OOD_SUITE, root, plan.ood.partitions, plan.ood.requests))
            sets += registered_sets(config.suites, registered, config.suite_locations, config.max_prompts, context.log)
        except (EvalPlanError, SuiteError) as err:
            raise dg.Failure(str(err)) from None
        plan = replace(plan, suites=tuple(sets))
        settings = AcceptanceSettings(
            num_speculative_tokens=config.num_speculative_tokens,
            max_tokens=config.max_tokens,
            concurrency=config.concurrency,
            port=config.port or vllm_server.port + 1,
            measure_baseline=config.measure_baseline,
            sweep_num_speculative_tokens=tuple(config.sweep_num_speculative_tokens),
            sweep_max_prompts=config.sweep_max_prompts,
        )
        simulating, config_values = (verifier if config.simulated else None), config.model_dump()
        try:
            key = measurement_key(
                plan, settings, vllm_server, simulating, config_values, training_run=run, code_version=CODE_VERSION
            )
            stored = stored_measurement(context.instance, run, key) if config.reuse and key else None
            if stored is not None:
                context.log.info(
                    f"{checkpoint.name}: measured in run {stored.metadata['measured_in_run'].value} with this "
                    "checkpoint, these prompt sets and settings, the same served weights and vLLM; that measurement "
                    "is reused (reuse: false measures again)"
                )
                return stored
            report = measure_acceptance(
                plan,
                settings,
                vllm_server,
                simulating,
                asset_folder(storage.root, EAGLE3_EVAL),
                context.log,
                training_run=run,
                config=config_values,
                dagster_run_id=context.run.run_id,
                measurement_key=key,
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
        return acceptance_check_result(
            context.partition_key, latest_metadata(context.instance, EAGLE3_EVAL, context.partition_key)
        )

    @dg.asset_check(
        asset=eagle3_eval,
        partitions_def=runs,
        description=f"Each prompt set's τ from the per-request statistics agrees with the server's spec-decode "
        f"counters within {AGREEMENT:.0%} (the same verify steps, counted twice).",
    )
    def per_request_matches_counters(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return counters_check_result(latest_metadata(context.instance, EAGLE3_EVAL, context.partition_key) or {})

    return {"assets": [eagle3_eval], "checks": [acceptance_length_above_floor, per_request_matches_counters]}
