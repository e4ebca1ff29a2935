"""The ``eagle-assets`` commands that look after what the runs leave: plugins, managed vLLM servers, the kept
checkpoints and garbage collection (``eagle_assets.cli`` registers them; the lineage commands are
:mod:`.lineage_commands`).

Each command imports what it needs when it runs, as in ``eagle_assets.cli``: `eagle-assets --help`
should not wait seconds for Dagster, pyarrow and the stages to load.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import typer


def command_environ(ctx: typer.Context) -> Mapping[str, str]:
    """The environment a command reads: the mapping its caller passed as the context's ``obj``
    (``CliRunner().invoke(app, args, obj={...})``), else this process's. A test passes one: other threads of
    its process start servers and demos that inherit os.environ."""
    return ctx.obj if isinstance(ctx.obj, Mapping) else os.environ


def configured_instance(stack: contextlib.ExitStack, environ: Mapping[str, str] = os.environ):
    """The Dagster instance of $DAGSTER_HOME (as ``environ`` names it), or None when it is unset or names no
    folder (said on stderr: the checks that need the instance's record are then skipped, not failed)."""
    import dagster as dg

    home = environ.get("DAGSTER_HOME")
    if not home:
        return None
    if not Path(home).is_dir():
        typer.echo(f"note: $DAGSTER_HOME {home} is not a folder: no Dagster instance is read", err=True)
        return None
    return stack.enter_context(dg.DagsterInstance.from_config(home))


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


_STATE_DIR_HELP = "vllm_server.state_dir, if not the default."


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
    from eagle_assets.maintenance.checkpoints import as_json as entries_json
    from eagle_assets.maintenance.checkpoints import list_checkpoints, report_lines
    from eagle_assets.resources.storage import default_root

    with contextlib.ExitStack() as stack:
        instance = configured_instance(stack)
        entries = list_checkpoints(root or default_root(), instance, verify)
    lines = [json.dumps(entries_json(entries), indent=2)] if as_json else report_lines(entries)
    for line in lines:
        typer.echo(line)


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
    import dagster as dg

    from eagle_assets.core.units import human_bytes
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
