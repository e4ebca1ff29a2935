"""What a materialization of ``eagle3_eval`` records: a measurement's numbers, tables, plot and files as
metadata (:func:`materialize_result`), or a stored measurement of the same thing reused
(:func:`stored_measurement`, keyed by :mod:`~eagle_assets.eagle3_eval.reuse`)."""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.layout import EAGLE3_EVAL
from eagle_assets.core.partitions import plain_metadata, recent_materializations
from eagle_assets.eagle3_eval.acceptance import MEASUREMENT_KEY, EvalReport
from eagle_assets.eagle3_eval.numbers import acceptance_table
from eagle_assets.eagle3_eval.plot import markdown_image
from eagle_assets.eagle3_eval.reuse import stored_report
from eagle_assets.eagle3_eval.suite_sets import suites_table
from eagle_assets.eagle3_eval.suite_summary import summary_table

# The training run's materializations searched for a stored measurement to reuse.
REUSE_LOOKBACK = 20


def per_request_metadata(report: EvalReport) -> dict:
    """A Markdown table per set, the plot of τ along the output (inline and as a file), requests.parquet."""
    meta = {}
    for label, summary in report.summaries.items():
        if summary.tally.steps:
            counter_tau = report.numbers.get(f"{label}/acceptance_length")
            meta[f"{label}/per_request"] = dg.MetadataValue.md(summary_table(summary, counter_tau))
    if report.plot_file.exists():
        meta["tau_along_trace"] = dg.MetadataValue.md(markdown_image(report.plot_file, "τ along the output"))
        meta["tau_along_trace_plot"] = dg.MetadataValue.path(str(report.plot_file))
    if report.requests is not None:
        meta["requests"] = dg.MetadataValue.path(str(report.requests_file))
    return meta


def materialize_result(report: EvalReport, run: str, min_acceptance_length: float) -> dg.MaterializeResult:
    """The numbers of every prompt set, their tables, the plot, and where the report and its tables are."""
    plan = report.plan
    return dg.MaterializeResult(
        metadata={
            **report.numbers,
            "acceptance": dg.MetadataValue.md(acceptance_table(report.numbers, report.labels)),
            "suites": dg.MetadataValue.md(suites_table(report.report["suites"])),
            **per_request_metadata(report),
            **({"sweep": dg.MetadataValue.md(report.sweep.table())} if report.sweep is not None else {}),
            "eval_set": plan.label,
            "ood_eval_set": plan.ood_label or "(none)",
            "training_run": run,
            "min_acceptance_length": min_acceptance_length,
            "checkpoint": dg.MetadataValue.path(str(plan.checkpoint)),
            "measured_in_run": report.report["dagster_run_id"],
            **({MEASUREMENT_KEY: report.report[MEASUREMENT_KEY]} if report.report.get(MEASUREMENT_KEY) else {}),
            "report": dg.MetadataValue.path(str(report.report_file)),
            "greedy_outputs": dg.MetadataValue.path(str(report.greedy_outputs_file)),
            "partitions": ", ".join(plan.partitions),
            "ood_partitions": ", ".join(plan.ood.partitions) or "(none)",
        },
        data_version=dg.DataVersion(report.data_version),
    )


def stored_measurement(instance: dg.DagsterInstance, run: str, key: str) -> dg.MaterializeResult | None:
    """The training run's latest materialization measured under ``key`` whose files still hold that
    measurement, as this materialization's result (its metadata, ``measured_in_run`` included)."""
    for materialization in recent_materializations(instance, EAGLE3_EVAL, run, REUSE_LOOKBACK):
        report = stored_report(plain_metadata(materialization), key)
        if report is not None:
            return dg.MaterializeResult(
                metadata=dict(materialization.metadata), data_version=dg.DataVersion(report["data_version"])
            )
    return None
