"""The ``eagle-assets`` command line."""

from __future__ import annotations

import json

import typer

app = typer.Typer(help="eagle-assets: EAGLE-3 drafts for reasoning models, as Dagster assets.", no_args_is_help=True)


@app.command()
def plugins(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List plugins, the hooks they implement, their dataset sources and verifier backends."""
    from eagle_assets.plugin_report import plugin_report

    report = plugin_report()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for plugin in report["plugins"]:
        version = f" {plugin['version']}" if plugin.get("version") else ""
        typer.echo(f"{plugin['name']}{version}: {', '.join(plugin['hooks'])}")
    typer.echo("\nDataset sources:")
    for src in report["dataset_sources"]:
        typer.echo(f"  {src['name']} (v{src['version']}): {src['description']}")
    typer.echo("\nVerifier backends:")
    for backend in report["verifier_backends"]:
        typer.echo(f"  {backend['name']} (v{backend['version']}): {backend['description']}")
    for err in report["load_errors"]:
        typer.echo(f"\nFAILED to load plugin {err['plugin']}: {err['error']}", err=True)
