"""One ``eagle3_eval`` without Dagster: measure a planned checkpoint's acceptance
(:func:`~eagle_assets.eagle3_eval.evaluate.evaluate`) and write what it measured on, ``report.json`` and
``greedy_outputs.parquet``, under the evaluations folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from eagle_assets.core.files import combined_hash, write_json, write_parquet
from eagle_assets.core.layout import EVAL_REPORT_FILE, GREEDY_OUTPUTS_FILE
from eagle_assets.eagle3_eval.evaluate import Evaluation, evaluate
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.resources import Verifier, VLLMServer

OUTPUTS_SCHEMA = pa.schema(
    [
        ("eval_set", pa.string()),
        ("prompt_id", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
        ("finish_reason", pa.string()),
    ]
)


@dataclass(frozen=True)
class AcceptanceSettings:
    """How the checkpoint is served and measured (the launchpad's settings)."""

    num_speculative_tokens: int = 3
    max_tokens: int = 1024
    concurrency: int = 64
    port: int | None = None  # the speculating server's
    measure_baseline: bool = False


@dataclass(frozen=True)
class EvalReport:
    """What an evaluation measured, per prompt set under its label, and where it was written."""

    plan: EvalPlan
    labels: list[str]  # every set the numbers hold, in table order
    numbers: dict  # the measured numbers, keys prefixed by their set's label
    report: dict  # report.json
    folder: Path

    @property
    def report_file(self) -> Path:
        return self.folder / EVAL_REPORT_FILE

    @property
    def greedy_outputs_file(self) -> Path:
        return self.folder / GREEDY_OUTPUTS_FILE

    @property
    def data_version(self) -> str:
        """The checkpoint and the numbers: the same checkpoint measured the same is the same version."""
        return combined_hash([self.plan.checkpoint.name, json.dumps(self.numbers, sort_keys=True)])[:16]


def build_report(
    plan: EvalPlan, evaluation: Evaluation, folder: Path, *, training_run: str, config: dict, dagster_run_id: str
) -> EvalReport:
    """The numbers of ``evaluation`` under each set's label, with each set's ``excluded_trained``, and the
    report: the checkpoint, both sets' partitions and prompt ids, the settings, the server, the numbers."""
    label, ood_label = plan.label, plan.ood_label
    numbers = {
        **evaluation.metadata_by_set(label, ood_label or "ood"),
        f"{label}/excluded_trained": plan.heldout.excluded_trained,
    }
    if ood_label:
        numbers[f"{ood_label}/excluded_trained"] = plan.ood.excluded_trained
    labels = [
        label,
        *(f"{label}/variant[{name}]" for name in evaluation.by_variant),
        *([ood_label] if ood_label else []),
    ]
    report = {
        "training_run": training_run,
        "eval_sets": labels,
        "checkpoint": str(plan.checkpoint),
        "partitions": plan.partitions,
        "prompt_ids": [r.prompt_id for r in plan.heldout.requests],
        "ood_partitions": plan.ood.partitions,
        "ood_prompt_ids": [r.prompt_id for r in plan.ood.requests],
        "config": config,
        "server_model": evaluation.served.server_model,
        "vllm_version": evaluation.served.vllm_version,
        "dagster_run_id": dagster_run_id,
        **numbers,
    }
    return EvalReport(plan, labels, numbers, report, folder)


def greedy_outputs(plan: EvalPlan, evaluation: Evaluation) -> pa.Table:
    """The verifier's greedy outputs the numbers were measured on (to re-simulate other drafts on them)."""
    served_sets = [(plan.heldout.name, evaluation.served), (plan.ood.name, evaluation.ood)]
    return pa.Table.from_pylist(
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
    )


def write_report(report: EvalReport, outputs: pa.Table) -> None:
    write_json(report.report, report.report_file)
    write_parquet(outputs, report.greedy_outputs_file)


def measure_acceptance(
    plan: EvalPlan,
    settings: AcceptanceSettings,
    server: VLLMServer,
    verifier: Verifier | None,
    evaluations: Path,
    log,
    *,
    training_run: str,
    config: dict,
    dagster_run_id: str,
) -> EvalReport:
    """Serve the verifier with the plan's checkpoint as its draft, measure both prompt sets (and, with
    ``verifier``, the simulated acceptance), and write the report under ``evaluations/<checkpoint>``.
    Raises :class:`~eagle_assets.eagle3_eval.evaluate.EvaluationError` when the measurement cannot be made."""
    log.info(
        f"evaluating {plan.checkpoint} on {len(plan.heldout.requests)} held-out prompts of {plan.partitions} and "
        f"{len(plan.ood.requests)} out-of-distribution prompts of {plan.ood.partitions}, "
        f"K={settings.num_speculative_tokens}, greedy, max_tokens {settings.max_tokens}"
    )
    evaluation = evaluate(
        plan.checkpoint,
        plan.heldout.requests,
        server,
        verifier,
        num_speculative_tokens=settings.num_speculative_tokens,
        max_tokens=settings.max_tokens,
        concurrency=settings.concurrency,
        port=settings.port,
        measure_baseline=settings.measure_baseline,
        logger=log,
        ood_requests=plan.ood.requests,
    )
    report = build_report(
        plan,
        evaluation,
        evaluations / plan.checkpoint.name,
        training_run=training_run,
        config=config,
        dagster_run_id=dagster_run_id,
    )
    write_report(report, greedy_outputs(plan, evaluation))
    return report
