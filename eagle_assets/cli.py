"""The ``eagle-assets`` command line (a typer app; each command is a thin wrapper over a module).

The pipeline's commands live here; those that look after what the runs leave behind (plugins,
servers, checkpoints, gc) live in ``eagle_assets.maintenance.commands``, the lineage commands in
``eagle_assets.maintenance.lineage_commands``. The bottom of this module registers them on ``app``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from eagle_assets.maintenance import commands as maintenance
from eagle_assets.maintenance import lineage_commands

# Each command imports what it needs when it runs: Dagster, pyarrow and the stages take seconds to load,
# and `eagle-assets --help` or a typo should not wait for them.
app = typer.Typer(help="eagle-assets: EAGLE-3 drafts for reasoning models, as Dagster assets.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """eagle-assets: EAGLE-3 drafts for reasoning models, as Dagster assets."""


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
    $DAGSTER_HOME/demo-logs/demo-<time>.log (its path printed first) unless --verbose.
    """
    from eagle_assets.definitions import build_definitions
    from eagle_assets.demo.command import demo_command

    status = demo_command(build_definitions, partition, port, verifier, feature_dtype, verbose, training_run)
    if status:
        raise typer.Exit(status)


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
    scratch_cap_gb: float = typer.Option(
        None,
        "--scratch-cap-gb",
        help="Cap in GB on the scratch folder of online features (default: the training stage's; the plan "
        "prints the cap it used).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Disk (bf16 and fp8 features) and GPU-hours per stage, stored vs online features side by side, and
    whether the storage root has room."""
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
            scratch_cap_gb,
            as_json,
        )
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    for line in lines:
        typer.echo(line)


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


# In the order `eagle-assets --help` lists them.
app.command()(maintenance.plugins)
app.command("tiny-verifier")(tiny_verifier)
app.command()(demo)
app.command()(maintenance.servers)
app.command()(plan)
app.command("add-training-run")(add_training_run)
app.command()(maintenance.checkpoints)
app.command()(maintenance.gc)
app.add_typer(lineage_commands.lineage_app, name="lineage")
