"""``eagle-assets lineage show|verify``: a checkpoint's chain back to the prompts, and its stored hashes
checked (``eagle_assets.cli`` registers ``lineage_app``).

Each command imports what it needs when it runs, as in ``eagle_assets.cli``: `eagle-assets --help`
should not wait seconds for Dagster, pyarrow and the stages to load.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer

from eagle_assets.maintenance.commands import command_environ, configured_instance

lineage_app = typer.Typer(
    help="Audit a checkpoint: its chain back to the prompts, and its stored hashes.", no_args_is_help=True
)

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


_KEY_HELP = (
    "File holding the lineage key (default: $EAGLE_ASSETS_LINEAGE_KEY_FILE, else the key in "
    "$EAGLE_ASSETS_LINEAGE_KEY): check lineage.sig, the record's signature."
)


@contextlib.contextmanager
def _verify_progress():
    """A progress callback drawing files, bytes, rate and ETA on stderr when it is a terminal; else None."""
    import sys

    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (
        TextColumn("hashing"),
        BarColumn(),
        TextColumn("{task.fields[files]} files"),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True, refresh_per_second=4) as bar:
        task = bar.add_task("hashing", total=None, files="0/0")

        def update(p) -> None:
            total = max(p.bytes_total, p.bytes_done)
            bar.update(task, completed=p.bytes_done, total=total, files=f"{p.files_done}/{p.files_total}")

        yield update


@lineage_app.command("verify")
def lineage_verify(
    ctx: typer.Context,
    checkpoint: Path = typer.Argument(..., help="Checkpoint folder (holds lineage.json)."),
    root: Path = typer.Option(None, "--root", help=_ROOT_HELP),
    quick: bool = typer.Option(
        False, "--quick", help="Check every file's size and the sha256 of a random sample (default: every sha256)."
    ),
    sample: int = typer.Option(None, "--sample", min=0, help="--quick: how many files to rehash (default 32)."),
    seed: int = typer.Option(None, "--seed", help="--quick: the sample's seed (default: random, printed)."),
    workers: int = typer.Option(None, "--workers", min=1, help="Threads hashing files (default: min(32, 4 x cores))."),
    key_file: Path = typer.Option(None, "--key-file", help=_KEY_HELP),
    sign: bool = typer.Option(
        False, "--sign", help="Write a missing lineage.sig with the key, when all else passed and the instance agrees."
    ),
) -> None:
    """Check lineage.json against its sha256 (lineage.sha256, and the checkpoint's materialization in the
    Dagster instance when $DAGSTER_HOME is set) and, given a key, its signature (lineage.sig); the
    checkpoint's content hash; and every artifact's hash (--quick: every size and a sample's hashes);
    exit 1 naming each one that changed or vanished."""
    from eagle_assets.core.layout import LINEAGE_SIGNATURE_FILE
    from eagle_assets.lineage.record import KEY_ENV, LineageError, lineage_key, sign_lineage
    from eagle_assets.lineage.verify import DEFAULT_SAMPLE, summary_line, verify_lineage

    environ = command_environ(ctx)
    try:
        key = lineage_key(key_file, environ)
    except LineageError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if sign and key is None:
        typer.echo(f"--sign needs the lineage key: --key-file or ${KEY_ENV}", err=True)
        raise typer.Exit(2)
    with contextlib.ExitStack() as stack:
        instance = configured_instance(stack, environ)
        try:
            with _verify_progress() as progress:
                result = verify_lineage(
                    checkpoint,
                    root,
                    instance,
                    quick=quick,
                    sample=DEFAULT_SAMPLE if sample is None else sample,
                    seed=seed,
                    key=key,
                    workers=workers,
                    progress=progress,
                )
        except LineageError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
    signed = False
    if sign and result.signature == "missing":
        others = [p for p in result.problems if p.kind != "signature"]
        if others or not result.against_instance:
            why = f"{len(others)} other problems" if others else "the Dagster instance did not confirm the record"
            typer.echo(f"not signed: {why}", err=True)
        else:
            sign_lineage(checkpoint, key)
            result.problems, result.signature, signed = others, "ok", True
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    for problem in result.problems:
        typer.echo(str(problem), err=True)
    if result.problems:
        typer.echo(f"{len(result.problems)} problems ({result.checked} artifacts checked)", err=True)
    else:
        against = ["lineage.sha256"]
        against += ["the Dagster instance"] if result.against_instance else []
        against += [LINEAGE_SIGNATURE_FILE + (" (signed now)" if signed else "")] if result.signature == "ok" else []
        what = "size" if result.tier == "quick" else "sha256"
        sampled = f", {result.sampled} sampled ones their sha256" if result.tier == "quick" else ""
        typer.echo(
            f"ok: lineage.json matches {' and '.join(against)}; "
            f"{result.checked} artifacts match their recorded {what}{sampled} ({result.tier} tier)"
        )
    typer.echo(summary_line(result), err=True)
    if key is None and not result.against_instance:
        present = (
            f"; {LINEAGE_SIGNATURE_FILE} is present but unchecked"
            if (checkpoint / LINEAGE_SIGNATURE_FILE).exists()
            else ""
        )
        typer.echo(
            "note: no lineage key and no Dagster instance record: this checks only that the record is "
            "self-consistent (lineage.json edited and lineage.sha256 rewritten to match would pass); "
            f"give --key-file or ${KEY_ENV} to check the signature{present}",
            err=True,
        )
    if result.problems:
        raise typer.Exit(1)
