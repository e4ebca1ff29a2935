"""The ``eagle-assets`` command line (a typer app; each command is a thin wrapper over a module)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

# Each command imports what it needs when it runs: Dagster, pyarrow and the stages take seconds to load,
# and `eagle-assets --help` or a typo should not wait for them.
app = typer.Typer(help="eagle-assets: EAGLE-3 drafts for reasoning models, as Dagster assets.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """eagle-assets: EAGLE-3 drafts for reasoning models, as Dagster assets."""


@app.command()
def plugins(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List plugins, the hooks they implement, their dataset sources and verifier backends."""
    from eagle_assets.maintenance.plugin_report import plugin_report

    report = plugin_report()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for plugin in report["plugins"]:
        version = f" {plugin['version']}" if plugin.get("version") else ""
        typer.echo(f"{plugin['name']}{version} ({plugin['origin']}): {', '.join(plugin['hooks'])}")
    typer.echo("\nDataset sources:")
    for src in report["dataset_sources"]:
        typer.echo(f"  {src['name']} (v{src['version']}, {src['plugin']}): {src['description']}")
    typer.echo("\nVerifier backends:")
    for backend in report["verifier_backends"]:
        typer.echo(f"  {backend['name']} (v{backend['version']}, {backend['plugin']}): {backend['description']}")
    for err in report["load_errors"]:
        typer.echo(f"\nFAILED to load plugin {err['plugin']}: {err['error']}", err=True)


@app.command("tiny-verifier")
def tiny_verifier(
    path: Path = typer.Argument(
        None, help="Copy the model folder here (must not exist yet). Omit to only print the cache path."
    ),
    kind: str = typer.Option(
        "tiny-qwen3",
        "--kind",
        help="Which embedded verifier: tiny-qwen3 (Qwen3) or tiny-kimi "
        "(Kimi-K2.5-shaped: DeepSeek-V3 MLA + experts in a kimi_k25 wrapper).",
    ),
) -> None:
    """Build (or reuse from the cache) an embedded tiny reasoning verifier and print its folder."""
    import shutil

    from eagle_assets.tiny_verifier.cache import cached_embedded_verifier

    try:
        cached = cached_embedded_verifier(kind, log=lambda line: typer.echo(line, err=True))
    except ValueError as exc:
        typer.echo(f"--kind: {exc}", err=True)
        raise typer.Exit(2) from None
    if path is None:
        typer.echo(str(cached))
        return
    if path.exists():
        typer.echo(f"{path} already exists; pass a new folder name", err=True)
        raise typer.Exit(1)
    shutil.copytree(cached, path)
    typer.echo(str(path))


@app.command()
def demo(
    partition: str = typer.Option("demo", help="Dataset source (partition) to run the graph on."),
    port: int = typer.Option(
        0,
        help="Port of the demo's vLLM server (the evaluation's speculating server "
        "takes the next one); 0 = the vllm_server resource's default.",
    ),
    verifier: str = typer.Option(
        "tiny-qwen3",
        help="Embedded verifier: tiny-qwen3 or tiny-kimi (Kimi-K2.5-shaped, "
        "served with the kimi_k2 reasoning parser, read by the kimi backend).",
    ),
    feature_dtype: str = typer.Option(
        "bfloat16",
        help="Storage dtype of the hidden states: bfloat16, or fp8 "
        "(hs-connectors' format, half the bytes; verifier.feature_dtype).",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Stream the full log (every Dagster event, vLLM and "
        "trainer line) to the terminal instead of status lines and a log file.",
    ),
    training_run: str = typer.Option(
        None,
        "--training-run",
        help="Training run (partition of the checkpoint and "
        "its evaluation); default demo, or demo-<verifier> for another verifier.",
    ),
) -> None:
    """Materialize every asset of the graph for one partition, recorded in the Dagster instance.

    Uses $DAGSTER_HOME (the Makefile sets a persistent one), so `make ui` shows the runs afterwards.
    The terminal shows a status line per stage and a result line per asset; the full log goes to
    $DAGSTER_HOME/logs/demo-<time>.log (its path printed first) unless --verbose.
    """
    import contextlib
    import os
    import time

    import dagster as dg

    from eagle_assets.definitions import build_definitions
    from eagle_assets.demo.command import demo_training_run, outcome, run_demo, summarize
    from eagle_assets.demo.display import StageDisplay, output_to_file
    from eagle_assets.eagle3_eval.evaluate import replaced
    from eagle_assets.resources.embedded import embedded_resources

    log_file = (
        Path(os.environ.get("DAGSTER_HOME") or ".").resolve() / "logs" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.log"
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
                raise typer.Exit(2) from None
            if not all(r.success for r in results):
                if display:
                    say(f"the full log: {log_file}")
                raise typer.Exit(1)
            for line in outcome(instance, run_name):
                say(line)
        say(
            "Done. `make ui` shows these runs, their metadata and lineage (same DAGSTER_HOME); "
            "`eagle-assets checkpoints` lists every kept checkpoint."
        )


_STATE_DIR_HELP = "vllm_server.state_dir, if not the default."


@app.command()
def servers(
    stop: str = typer.Option(None, "--stop", help="Stop this server: its name (as listed) or its port."),
    state_dir: Path = typer.Option(None, "--state-dir", help=_STATE_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the managed vLLM servers eagle-assets started (port, pid, fingerprint, live users, age, idle
    time, model); stop one with --stop. Servers idle past their grace are stopped. Where hosts share the
    state folder, another host's servers are listed as on that host, never checked or stopped from here."""
    import logging

    from eagle_assets.orchestration.servers import servers_json, servers_report

    log = logging.getLogger("eagle_assets.servers")
    try:
        lines = servers_json(state_dir, stop, log) if as_json else servers_report(state_dir, stop, log)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    for line in lines:
        typer.echo(line)


lineage_app = typer.Typer(
    help="Audit a checkpoint: its chain back to the prompts, and its stored hashes.", no_args_is_help=True
)
app.add_typer(lineage_app, name="lineage")

_ROOT_HELP = "Storage root of the upstream files, if it moved since training (default: the one recorded)."


@lineage_app.command("show")
def lineage_show(
    checkpoint: Path = typer.Argument(..., help="Checkpoint folder (holds lineage.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print lineage.json as is."),
) -> None:
    """Print the chain prompt sources -> samples -> token sequences -> hidden states -> checkpoint."""
    from eagle_assets.lineage.record import LineageError, read_lineage
    from eagle_assets.lineage.render import summary_lines

    try:
        lineage = read_lineage(checkpoint)
    except LineageError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(lineage, indent=2))
        return
    for line in summary_lines(lineage, checkpoint):
        typer.echo(line)


@lineage_app.command("verify")
def lineage_verify(
    checkpoint: Path = typer.Argument(..., help="Checkpoint folder (holds lineage.json)."),
    root: Path = typer.Option(None, "--root", help=_ROOT_HELP),
) -> None:
    """Check lineage.json against its sha256 (lineage.sha256, and the checkpoint's materialization in the
    Dagster instance when $DAGSTER_HOME is set), the checkpoint's content hash, and every artifact's hash;
    exit 1 naming each one that changed or vanished."""
    import contextlib
    import os

    import dagster as dg

    from eagle_assets.lineage.record import LineageError
    from eagle_assets.lineage.verify import verify_lineage

    with contextlib.ExitStack() as stack:
        instance = stack.enter_context(dg.DagsterInstance.get()) if os.environ.get("DAGSTER_HOME") else None
        try:
            result = verify_lineage(checkpoint, root, instance)
        except LineageError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    for problem in result.problems:
        typer.echo(str(problem), err=True)
    if result.problems:
        typer.echo(f"{len(result.problems)} problems ({result.checked} artifacts checked)", err=True)
        raise typer.Exit(1)
    against = "lineage.sha256" + (" and the Dagster instance" if instance is not None and not result.notes else "")
    typer.echo(f"ok: lineage.json matches {against}; {result.checked} artifacts match their recorded sha256")


@app.command()
def plan(
    verifier: str = typer.Option(
        "tiny",
        "--verifier",
        help="A preset (tiny, llama-3.1-8b, kimi-k2.5) or a "
        "verifier config.json / model folder (a nested text_config is read).",
    ),
    prompts: int = typer.Option(None, "--prompts", min=1, help="Number of prompts to plan for."),
    partition: list[str] = typer.Option(
        [],
        "--partition",
        help="Materialized dataset partition(s): prompt count "
        "from prompts, token statistics from reasoning_samples (repeatable).",
    ),
    root: Path = typer.Option(
        None, "--root", help="Storage root (default: $EAGLE_ASSETS_DATA or ./.eagle_assets_data)."
    ),
    aux_layers: str = typer.Option("", "--aux-layers", help="Aux layer ids, e.g. 2,30,58; default: the backend's."),
    prompt_tokens: float = typer.Option(
        None, "--prompt-tokens", min=1, help="Mean prompt tokens (overrides the assumed/measured)."
    ),
    completion_tokens: float = typer.Option(
        None, "--completion-tokens", min=1, help="Mean completion tokens (overrides)."
    ),
    generation_tok_s: float = typer.Option(
        None,
        "--generation-tok-s",
        min=1,
        help="Decode tokens/s of one vLLM replica, if you measured it (the project has no GPU figure).",
    ),
    generation_gpus: int = typer.Option(8, "--generation-gpus", min=1, help="GPUs per vLLM replica (TP size)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Disk (bf16 and fp8 features) and GPU-hours per stage, and whether the storage root has room."""
    from eagle_assets.capacity.report import plan_report

    try:
        lines = plan_report(
            verifier,
            prompts,
            partition,
            root,
            aux_layers,
            prompt_tokens,
            completion_tokens,
            generation_tok_s,
            generation_gpus,
            as_json,
        )
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    for line in lines:
        typer.echo(line)


@app.command("add-training-run")
def add_training_run(name: str = typer.Argument(..., help="The run's name, e.g. kimi-k25-v1.")) -> None:
    """Add a named training run (a partition of eagle3_checkpoint and eagle3_eval) to the Dagster instance
    ($DAGSTER_HOME); the UI's launchpad can add one too. Its first materialization fixes its recipe."""
    import dagster as dg

    from eagle_assets.core.partitions import add_training_run as add

    with dg.DagsterInstance.get() as instance:
        try:
            added = add(instance, name)
        except ValueError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
    typer.echo(
        f"training run {name} {'added' if added else 'exists already'}: materialize eagle3_checkpoint for "
        "this partition (the `draft` job trains and evaluates it)"
    )


@app.command()
def checkpoints(
    root: Path = typer.Option(
        None, "--root", help="Storage root (default: $EAGLE_ASSETS_DATA or ./.eagle_assets_data)."
    ),
    verify: bool = typer.Option(
        True, "--verify/--no-verify", help="Run `lineage verify` on each (rehashes every recorded file)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the kept checkpoints side by side: training run, recipe, upstream data versions, τ per evaluated
    prompt set and lineage status. eagle3_eval evaluates any of them (launchpad `checkpoint`: its name)."""
    import contextlib
    import os

    import dagster as dg

    from eagle_assets.maintenance.checkpoints import as_json as entries_json
    from eagle_assets.maintenance.checkpoints import list_checkpoints, report_lines
    from eagle_assets.resources.storage import default_root

    with contextlib.ExitStack() as stack:
        instance = stack.enter_context(dg.DagsterInstance.get()) if os.environ.get("DAGSTER_HOME") else None
        entries = list_checkpoints(root or default_root(), instance, verify)
    lines = [json.dumps(entries_json(entries), indent=2)] if as_json else report_lines(entries)
    for line in lines:
        typer.echo(line)


@app.command()
def gc(
    root: Path = typer.Option(
        None, "--root", help="Storage root (default: $EAGLE_ASSETS_DATA or ./.eagle_assets_data)."
    ),
    keep_checkpoints: int = typer.Option(
        None,
        "--keep-checkpoints",
        min=0,
        help="Keep the N newest checkpoints and their inputs; older ones are garbage too (default: keep all).",
    ),
    delete: bool = typer.Option(False, "--delete", help="Remove what is listed (default: only list it)."),
    verbose: bool = typer.Option(False, "--verbose", help="List every file instead of counts per folder."),
    state_dir: Path = typer.Option(None, "--state-dir", help=_STATE_DIR_HELP),
) -> None:
    """List (then, with --delete, remove) stored files that neither a current materialization in the
    Dagster instance ($DAGSTER_HOME) nor a kept checkpoint's lineage.json references. Reconciles the
    instance first, as every run does (dead runs of this host failed, their slots freed; idle managed
    vLLM servers stopped)."""
    import os

    import dagster as dg

    from eagle_assets.capacity.plan import human_bytes
    from eagle_assets.maintenance.gc import CollectionRefused, collect_garbage, find_garbage, report_lines
    from eagle_assets.orchestration.recovery import reconcile
    from eagle_assets.resources.storage import default_root

    if not os.environ.get("DAGSTER_HOME"):
        typer.echo(
            "gc reads the current materializations from the Dagster instance: set DAGSTER_HOME to the "
            "instance that wrote this storage root",
            err=True,
        )
        raise typer.Exit(2)
    with dg.DagsterInstance.get() as instance:
        # A run killed on this host stays in progress until reconciled: --delete would refuse for ever,
        # and its outputs would be judged against an instance that still expects it to finish.
        reconcile(instance, by="eagle-assets gc", state_dir=state_dir)
        collection = find_garbage(root or default_root(), instance, keep_checkpoints)
        for line in report_lines(collection, verbose):
            typer.echo(line)
        if not delete:
            typer.echo("nothing deleted: pass --delete to remove these")
            return
        try:
            freed = collect_garbage(collection, instance)
        except CollectionRefused as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(1) from None
    typer.echo(f"freed {human_bytes(freed)}")
