"""What ``eagle-assets demo`` shows on the terminal: one status line per running stage, redrawn in place (its
latest count as a bar, with the rate and ETA the assets log), a result line as each asset is materialized
(its numeric metadata), then the summary.

Everything else — every Dagster event, vLLM's and the trainer's lines, library warnings — goes to a log file
whose path is printed first (``--verbose`` streams it to the terminal as before).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import dagster as dg

# "123/713" in a stage's progress line: the count its bar shows.
COUNT = re.compile(r"(\d+)/(\d+)")
# Lines a stage forwards from its vLLM server: they go to the file, not the status line.
FORWARDED = re.compile(r"^\[vllm\]|^\s*$")


class StageDisplay:
    """Status lines for the stages of a run, on ``terminal``. ``redraw`` (a TTY): the running stage's line is
    rewritten in place at most ``per_s`` times a second; otherwise only result lines are printed."""

    def __init__(self, terminal: TextIO, redraw: bool, per_s: float = 4.0):
        self.terminal = terminal
        self.redraw = redraw
        self.min_gap_s = 1.0 / per_s
        self.started: dict[str, float] = {}
        self.shown = ""
        self.last_draw = 0.0

    def progress(self, stage: str, message: str) -> None:
        """The stage's latest progress ``message`` (a log line of the asset)."""
        now = time.monotonic()
        self.started.setdefault(stage, now)
        if not self.redraw or FORWARDED.search(message) or now - self.last_draw < self.min_gap_s:
            return
        self.last_draw = now
        self._draw(self.status(stage, message, now - self.started[stage]))

    def status(self, stage: str, message: str, elapsed_s: float) -> str:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        count = COUNT.search(message)
        bar = ""
        if count and int(count.group(2)) > 0:
            done, total = int(count.group(1)), int(count.group(2))
            filled = min(20, 20 * done // total)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] "
        text = f"{stage:<18} {elapsed_s:5.0f}s {bar}{message.splitlines()[0] if message else ''}"
        return text[:width]

    def result(self, stage: str, text: str) -> None:
        """A stage's result line, with the seconds since its first status."""
        elapsed = time.monotonic() - self.started.get(stage, time.monotonic())
        self.line(f"{stage:<18} {elapsed:5.0f}s done: {text}")

    def line(self, text: str) -> None:
        """A line that stays (on a TTY cut to its width; the log file has it whole): clears the status line first."""
        self._draw("")
        width = shutil.get_terminal_size((100, 20)).columns - 1
        if self.redraw and len(text) > width:
            text = text[: width - 1] + "…"
        print(text, file=self.terminal, flush=True)

    def _draw(self, text: str) -> None:
        if not self.redraw or text == self.shown:
            return
        pad = max(0, len(self.shown) - len(text))
        self.terminal.write("\r" + text + " " * pad + ("\r" + text if pad else ""))
        self.terminal.flush()
        self.shown = text


def materialization_line(mat: dg.AssetMaterialization) -> str:
    """``asset[partition] version V: k=v, ...`` — its numeric metadata and data version."""
    numbers = ", ".join(
        f"{k}={v.value:.4g}" if isinstance(v.value, float) else f"{k}={v.value}"
        for k, v in mat.metadata.items()
        if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))
        and not k.startswith("dagster/")
        and v.value  # zero counters (e.g. skip reasons that never happened) are noise here
    )
    version = mat.tags.get("dagster/data_version", "?") if mat.tags else "?"
    partition = f"[{mat.partition}]" if mat.partition else ""
    return f"{mat.asset_key.to_user_string()}{partition} version {version}: {numbers}"


class _DisplayHandler(logging.Handler):
    """Feeds a run's log records (Dagster's ``dagster_meta`` on each) to a :class:`StageDisplay`."""

    def __init__(self, display: StageDisplay):
        super().__init__(level=logging.DEBUG)  # Dagster logs its events (materializations, step starts) at DEBUG
        self.display = display

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        step, event = meta.get("step_key"), meta.get("dagster_event")
        if not step:
            return
        if event is None:
            if record.levelno >= logging.INFO:
                self.display.progress(step, meta.get("orig_message", ""))
        elif event.is_step_start:
            self.display.progress(step, "starting")
        elif event.is_step_materialization:
            self.display.result(step, materialization_line(event.step_materialization_data.materialization))


def display_logger(display: StageDisplay) -> dg.LoggerDefinition:
    """A Dagster logger that drives ``display`` (the console logger keeps writing the full log)."""

    def build(_init_context) -> logging.Logger:
        logger = logging.Logger("eagle_assets.demo.display", level=logging.DEBUG)
        logger.addHandler(_DisplayHandler(display))
        return logger

    return dg.LoggerDefinition(build, description="The demo's in-place status lines (eagle_assets.demo.display).")


@contextmanager
def output_to_file(path: Path) -> Iterator[TextIO]:
    """Send this process's stdout and stderr — Python's and the file descriptors children inherit — to
    ``path`` (appended); yield a stream to the terminal they pointed at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    old_streams = sys.stdout, sys.stderr
    with open(path, "a", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        try:
            yield terminal
        finally:
            log.flush()
            sys.stdout, sys.stderr = old_streams
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()
