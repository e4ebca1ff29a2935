"""One ``eagle3_eval`` without Dagster: measure a planned checkpoint's acceptance
(:func:`~eagle_assets.eagle3_eval.evaluate.evaluate`) and write what it measured on under the evaluations
folder: ``report.json`` (every set's numbers, name and version), ``requests.parquet`` (one row per request,
its own speculative-decoding statistics), ``greedy_outputs.parquet`` and the plot of τ along the output."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from eagle_assets.core.files import combined_hash, write_json, write_parquet
from eagle_assets.core.layout import EVAL_REPORT_FILE, EVAL_REQUESTS_FILE, EVAL_TRACE_PLOT_FILE, GREEDY_OUTPUTS_FILE
from eagle_assets.eagle3_eval.evaluate import evaluate
from eagle_assets.eagle3_eval.greedy_outputs import greedy_outputs
from eagle_assets.eagle3_eval.numbers import Evaluation
from eagle_assets.eagle3_eval.per_request import AGREEMENT
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.eagle3_eval.plot import plot_tau_along_trace
from eagle_assets.eagle3_eval.request_rows import request_row, requests_table
from eagle_assets.eagle3_eval.served import ServedRun
from eagle_assets.eagle3_eval.suite_sets import HELDOUT_SUITE, OOD_SUITE, SuiteSet
from eagle_assets.eagle3_eval.suite_summary import SuiteSummary, summarize
from eagle_assets.eagle3_eval.sweep import Sweep
from eagle_assets.resources import Verifier, VLLMServer

# The report's (and the materialization's) name for what the measurement depends on (eagle3_eval.reuse).
MEASUREMENT_KEY = "measurement_key"


@dataclass(frozen=True)
class AcceptanceSettings:
    """How the checkpoint is served and measured (the launchpad's settings)."""

    num_speculative_tokens: int = 3
    max_tokens: int = 1024
    concurrency: int = 64
    port: int | None = None  # the speculating server's
    measure_baseline: bool = False
    sweep_num_speculative_tokens: tuple[int, ...] = ()
    sweep_max_prompts: int = 16


def measured_sets(plan: EvalPlan) -> list[SuiteSet]:
    """The plan's sets in order; without recorded suites, its held-out and out-of-distribution sets."""
    if plan.suites:
        return list(plan.suites)
    sets = [SuiteSet(plan.label, HELDOUT_SUITE, "?", "+".join(plan.partitions), list(plan.heldout.requests))]
    if plan.ood_label:
        sets.append(SuiteSet(plan.ood_label, OOD_SUITE, "?", "+".join(plan.ood.partitions), list(plan.ood.requests)))
    return sets


def served_runs(plan: EvalPlan, evaluation: Evaluation) -> dict[str, ServedRun]:
    """Each measured set's run by label."""
    runs = {plan.label: evaluation.served}
    if plan.ood_label and evaluation.ood is not None:
        runs[plan.ood_label] = evaluation.ood
    return {**runs, **evaluation.suites}


@dataclass(frozen=True)
class EvalReport:
    """What an evaluation measured, per prompt set under its label, and where it was written."""

    plan: EvalPlan
    labels: list[str]  # every set the numbers hold, in table order
    numbers: dict  # the measured numbers, keys prefixed by their set's label
    report: dict  # report.json
    folder: Path
    requests: pa.Table | None = None  # requests.parquet
    summaries: dict[str, SuiteSummary] = field(default_factory=dict)  # per-request numbers by set label
    sweep: Sweep | None = None

    @property
    def report_file(self) -> Path:
        return self.folder / EVAL_REPORT_FILE

    @property
    def greedy_outputs_file(self) -> Path:
        return self.folder / GREEDY_OUTPUTS_FILE

    @property
    def requests_file(self) -> Path:
        return self.folder / EVAL_REQUESTS_FILE

    @property
    def plot_file(self) -> Path:
        return self.folder / EVAL_TRACE_PLOT_FILE

    @property
    def data_version(self) -> str:
        """The checkpoint, each measured set's suite name and version (as report.json records them) and the
        numbers: the same checkpoint measured the same on the same suites is the same version."""
        suites = json.dumps([[s["name"], s["version"]] for s in self.report["suites"]])
        return combined_hash([self.plan.checkpoint.name, suites, json.dumps(self.numbers, sort_keys=True)])[:16]

    @property
    def disagreements(self) -> dict[str, float]:
        """The sets whose per-request τ and counters' τ differ by more than :data:`AGREEMENT` (relative)."""
        return {
            label: s.agreement
            for label, s in self.summaries.items()
            if s.agreement is not None and s.agreement > AGREEMENT
        }


def per_request_rows(plan: EvalPlan, evaluation: Evaluation) -> list[dict]:
    """One row per request of every measured set (``requests.parquet``)."""
    runs = served_runs(plan, evaluation)
    rows = []
    for suite in measured_sets(plan):
        run = runs.get(suite.label)
        if run is None:
            continue
        rows += [
            request_row(
                capture,
                suite=suite.label,
                suite_name=suite.name,
                suite_version=suite.version,
                category=suite.category_of(capture["prompt_id"]),
                num_speculative_tokens=evaluation.num_speculative_tokens,
                markers=run.think_markers,
            )
            for capture in sorted(run.rows, key=lambda r: (r["prompt_id"], r.get("turn", -1)))
        ]
    return rows


def build_report(
    plan: EvalPlan,
    evaluation: Evaluation,
    folder: Path,
    *,
    training_run: str,
    config: dict,
    dagster_run_id: str,
    measurement_key: str | None = None,
) -> EvalReport:
    """The numbers of ``evaluation`` under each set's label, with each set's ``excluded_trained`` and its
    per-request numbers, and the report: the checkpoint, every set's name, version and prompt ids, the
    settings, the server, the numbers, the per-request detail, the sweep, what it was measured under
    (:mod:`~eagle_assets.eagle3_eval.reuse`) and its data version."""
    label, ood_label = plan.label, plan.ood_label
    sets = measured_sets(plan)
    numbers = {
        **evaluation.metadata_by_set(label, ood_label or "ood"),
        f"{label}/excluded_trained": plan.heldout.excluded_trained,
    }
    if ood_label:
        numbers[f"{ood_label}/excluded_trained"] = plan.ood.excluded_trained
    rows = per_request_rows(plan, evaluation)
    runs = served_runs(plan, evaluation)
    summaries = {}
    for suite in sets:
        if suite.label not in runs:
            continue
        counters = runs[suite.label].counters
        summary = summaries[suite.label] = summarize(
            suite.label,
            [r for r in rows if r["suite"] == suite.label],
            evaluation.num_speculative_tokens,
            counters.drafts,
            counters.accepted,
        )
        numbers.update({f"{suite.label}/{key}": value for key, value in summary.numbers().items()})
    labels = [
        label,
        *(f"{label}/variant[{name}]" for name in evaluation.by_variant),
        *([ood_label] if ood_label else []),
        *evaluation.suites,
    ]
    report = {
        "training_run": training_run,
        "eval_sets": labels,
        "checkpoint": str(plan.checkpoint),
        "partitions": plan.partitions,
        "prompt_ids": [r.prompt_id for r in plan.heldout.requests],
        "ood_partitions": plan.ood.partitions,
        "ood_prompt_ids": [r.prompt_id for r in plan.ood.requests],
        "suites": [
            {**s.record(), "prompt_ids": [item.prompt_id for item in s.items]}
            for s in sets
            if s.label in runs  # an out-of-distribution set with no partition is not measured
        ],
        "config": config,
        "server_model": evaluation.served.server_model,
        "vllm_version": evaluation.served.vllm_version,
        "dagster_run_id": dagster_run_id,
        MEASUREMENT_KEY: measurement_key,
        **numbers,
        "per_request": {name: summary.detail() for name, summary in summaries.items() if summary.tally.steps},
        **({"sweep": evaluation.sweep.numbers()} if evaluation.sweep is not None else {}),
    }
    built = EvalReport(plan, labels, numbers, report, folder, requests_table(rows), summaries, evaluation.sweep)
    report["data_version"] = built.data_version
    return built


def write_report(report: EvalReport, outputs: pa.Table) -> None:
    """report.json, greedy_outputs.parquet and, with per-request rows, requests.parquet and the plot (a stale
    plot of an earlier evaluation of the checkpoint is removed when this one has nothing to plot)."""
    write_parquet(outputs, report.greedy_outputs_file)
    if report.requests is not None:
        write_parquet(report.requests, report.requests_file)
    bins = {label: s.bins for label, s in report.summaries.items()}
    k = int(report.numbers.get("num_speculative_tokens", 1))
    if plot_tau_along_trace(bins, report.plot_file, k) is None:
        report.plot_file.unlink(missing_ok=True)
    write_json(report.report, report.report_file)


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
    measurement_key: str | None = None,
) -> EvalReport:
    """Serve the verifier with the plan's checkpoint as its draft, measure every prompt set (and, with
    ``verifier``, the simulated acceptance; with a sweep, each K), and write the report under
    ``evaluations/<checkpoint>``. Raises :class:`~eagle_assets.eagle3_eval.evaluate.EvaluationError` when
    the measurement cannot be made."""
    suites = [s for s in measured_sets(plan) if s.name not in (HELDOUT_SUITE, OOD_SUITE)]
    log.info(
        f"evaluating {plan.checkpoint} on {len(plan.heldout.requests)} held-out prompts of {plan.partitions}, "
        f"{len(plan.ood.requests)} out-of-distribution prompts of {plan.ood.partitions}"
        + "".join(f", {len(s.items)} prompts of {s.label} ({s.version})" for s in suites)
        + f"; K={settings.num_speculative_tokens}, greedy, max_tokens {settings.max_tokens}"
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
        suites=suites,
        sweep_ks=settings.sweep_num_speculative_tokens,
        sweep_requests=plan.heldout.requests[: settings.sweep_max_prompts],
    )
    report = build_report(
        plan,
        evaluation,
        evaluations / plan.checkpoint.name,
        training_run=training_run,
        config=config,
        dagster_run_id=dagster_run_id,
        measurement_key=measurement_key,
    )
    for name, difference in report.disagreements.items():
        log.warning(
            f"{name}: the per-request τ and the server's counters differ by {difference:.2%} (more than "
            f"{AGREEMENT:.0%}): something else decoded on the server meanwhile, or requests were preempted"
        )
    write_report(report, greedy_outputs(plan, evaluation))
    return report
