"""The ``eagle3_eval`` asset: how many tokens the draft saves, measured by vLLM speculative decoding.

Partitioned like ``eagle3_checkpoint``, by named training run: the verifier is served with the run's
latest checkpoint (or one of its kept checkpoints, ``checkpoint`` in the launchpad) as its EAGLE-3 draft; held-out prompts
(split ``heldout`` of the current ``prompts`` tables; training reads only ``train`` and ``validation``)
are sent greedily, and the acceptance length and per-position acceptance come from vLLM's own
spec-decode counters. An out-of-distribution set (the evaluation-only partitions, e.g. ``demo_ood``)
is measured the same way on the same server and reported beside it as ``ood_*``. A held-out prompt
whose problem the checkpoint trained or validated on is never sent (``eagle_assets.eagle3_eval.eval_sets``).
The simulated value of the same draft on the in-distribution greedy outputs (verifier hidden states,
speculators' forward) is recorded too. All use vLLM's convention τ = 1 + accepted / drafts.

Each prompt set's numbers carry its label as a key prefix (``heldout[demo]/acceptance_length``,
``ood[demo_ood]/acceptance_length``): the UI plots one line per key, so a line never joins numbers of
different prompt sets, and training runs are separate partitions.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
from pydantic import Field

from eagle_assets.core.files import combined_hash, write_json, write_parquet
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    EAGLE3_EVAL,
    EVAL_REPORT_FILE,
    GREEDY_OUTPUTS_FILE,
    PIPELINE,
    TRAINING_FILE,
    prompts_file,
)
from eagle_assets.core.partitions import training_runs
from eagle_assets.eagle3_checkpoint import asset as checkpoint_asset
from eagle_assets.eagle3_checkpoint.checks import acceptance_check_result
from eagle_assets.eagle3_eval.eval_sets import EvalSetError, heldout_set, require_prompts, trained_on
from eagle_assets.eagle3_eval.evaluate import EvaluationError, acceptance_table, evaluate
from eagle_assets.plugin_manager import dataset_sources
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer

# Bump when the same checkpoint and settings would be measured differently.
CODE_VERSION = "eagle3_eval-3"
OUTPUTS_SCHEMA = pa.schema(
    [
        ("eval_set", pa.string()),
        ("prompt_id", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
        ("finish_reason", pa.string()),
    ]
)


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
    if not name:
        folder = checkpoint_asset.checkpoint_of(instance, run)
    else:
        folder = Path(name) if "/" in name else storage.path(EAGLE3_CHECKPOINT) / name
    if not (folder / "config.json").exists():
        raise dg.Failure(
            f"checkpoint {folder} is gone or not a checkpoint folder: `eagle-assets checkpoints` lists "
            f"the kept ones; re-materialize {EAGLE3_CHECKPOINT} for training run {run!r}"
        )
    trained_by = _training(folder).get("training_run")
    if trained_by is not None and trained_by != run:
        raise dg.Failure(
            f"checkpoint {folder.name} belongs to training run {trained_by!r}, not {run!r}: evaluate it "
            f"in partition {trained_by!r}, so each run's evaluations stay its own"
        )
    return folder


def _training(checkpoint: Path) -> dict:
    training = checkpoint / TRAINING_FILE
    return json.loads(training.read_text()) if training.exists() else {}


def training_partitions(checkpoint: Path) -> list[str]:
    return list(_training(checkpoint).get("data", {}).get("partitions", []))


def set_label(kind: str, partitions: list[str]) -> str:
    """A prompt set's name in metadata keys: ``heldout[demo]``, ``ood[demo_ood+mine]``."""
    return f"{kind}[{'+'.join(partitions)}]"


def ood_partitions(config: Eagle3EvalConfig, root: Path, log) -> list[str]:
    """The out-of-distribution partitions: as configured (each must be evaluation-only), else every
    evaluation-only source whose prompts are materialized."""
    sources = dataset_sources()
    evaluation_only = [name for name, source in sources.items() if source.evaluation_only]
    if config.ood_partitions is not None:
        wrong = [p for p in config.ood_partitions if p not in evaluation_only]
        if wrong:
            raise dg.Failure(
                f"ood_partitions {wrong} are not evaluation-only sources (their prompts have train "
                f"rows); the evaluation-only sources are {evaluation_only}"
            )
        return list(config.ood_partitions)
    chosen = [p for p in evaluation_only if prompts_file(root, p).exists()]
    unmaterialized = sorted(set(evaluation_only) - set(chosen))
    if unmaterialized:
        log.info(f"evaluation-only partitions without materialized prompts, not evaluated: {unmaterialized}")
    return chosen


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
        root = Path(storage.root)
        chosen = config.partitions or training_partitions(checkpoint) or partitions.get_partition_keys()
        try:
            trained = trained_on(checkpoint)
            sets = [
                require_prompts(heldout_set("in-distribution", root, chosen, config.max_prompts, trained)),
                heldout_set(
                    "out-of-distribution", root, ood_partitions(config, root, context.log), config.max_prompts, trained
                ),
            ]
        except EvalSetError as err:
            raise dg.Failure(str(err)) from None
        heldout, ood = sets
        for chosen_set in sets:
            if chosen_set.excluded_trained:
                context.log.warning(
                    f"{chosen_set.name}: {chosen_set.excluded_trained} held-out prompts left out: "
                    "the checkpoint trained or validated on their problem (prompts re-split after "
                    "training, or one problem in several partitions)"
                )
        context.log.info(
            f"evaluating {checkpoint} on {len(heldout.requests)} held-out prompts of {chosen} and "
            f"{len(ood.requests)} out-of-distribution prompts of {ood.partitions}, "
            f"K={config.num_speculative_tokens}, greedy, max_tokens {config.max_tokens}"
        )
        try:
            result = evaluate(
                checkpoint,
                heldout.requests,
                vllm_server,
                verifier if config.simulated else None,
                num_speculative_tokens=config.num_speculative_tokens,
                max_tokens=config.max_tokens,
                concurrency=config.concurrency,
                port=config.port or vllm_server.port + 1,
                measure_baseline=config.measure_baseline,
                logger=context.log,
                ood_requests=ood.requests,
            )
        except EvaluationError as err:
            raise dg.Failure(str(err)) from err
        label = set_label("heldout", chosen)
        ood_label = set_label("ood", ood.partitions) if ood.partitions else None
        numbers = {
            **result.metadata_by_set(label, ood_label or "ood"),
            f"{label}/excluded_trained": heldout.excluded_trained,
        }
        if ood_label:
            numbers[f"{ood_label}/excluded_trained"] = ood.excluded_trained
        labels = [
            label,
            *(f"{label}/variant[{name}]" for name in result.by_variant),
            *([ood_label] if ood_label else []),
        ]
        report = {
            "training_run": run,
            "eval_sets": labels,
            "checkpoint": str(checkpoint),
            "partitions": chosen,
            "prompt_ids": [r.prompt_id for r in heldout.requests],
            "ood_partitions": ood.partitions,
            "ood_prompt_ids": [r.prompt_id for r in ood.requests],
            "config": config.model_dump(),
            "server_model": result.served.server_model,
            "vllm_version": result.served.vllm_version,
            "dagster_run_id": context.run.run_id,
            **numbers,
        }
        folder = storage.path(EAGLE3_EVAL) / checkpoint.name
        write_json(report, folder / EVAL_REPORT_FILE)
        # The verifier's greedy outputs the numbers were measured on (re-simulate other drafts on them).
        served_sets = [(heldout.name, result.served), (ood.name, result.ood)]
        write_parquet(
            pa.Table.from_pylist(
                [
                    {
                        "eval_set": name,
                        "prompt_id": r["prompt_id"],
                        "prompt_token_ids": r["prompt_token_ids"],
                        "token_ids": r["token_ids"],
                        "finish_reason": r["finish_reason"],
                    }
                    for name, served in served_sets
                    if served is not None
                    for r in served.ok_rows
                ],
                schema=OUTPUTS_SCHEMA,
            ),
            folder / GREEDY_OUTPUTS_FILE,
        )
        version = combined_hash([checkpoint.name, json.dumps(numbers, sort_keys=True)])[:16]
        return dg.MaterializeResult(
            metadata={
                **numbers,
                "acceptance": dg.MetadataValue.md(acceptance_table(numbers, labels)),
                "eval_set": label,
                "ood_eval_set": ood_label or "(none)",
                "training_run": run,
                "min_acceptance_length": config.min_acceptance_length,
                "checkpoint": dg.MetadataValue.path(str(checkpoint)),
                "report": dg.MetadataValue.path(str(folder / EVAL_REPORT_FILE)),
                "greedy_outputs": dg.MetadataValue.path(str(folder / GREEDY_OUTPUTS_FILE)),
                "partitions": ", ".join(chosen),
                "ood_partitions": ", ".join(ood.partitions) or "(none)",
            },
            data_version=dg.DataVersion(version),
        )

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
