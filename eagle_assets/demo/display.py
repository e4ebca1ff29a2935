"""What ``eagle-assets demo`` shows on the terminal: one status line per running stage, redrawn in place (its
latest count as a bar, with the rate and ETA the assets log), a result line as each asset is materialized
(its headline numbers), then the summary; no line is wider than :data:`LINE_WIDTH`.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import dagster as dg

# "123/713" in a stage's progress line: the count its bar shows.
COUNT = re.compile(r"(\d+)/(\d+)")
# Lines a stage forwards from its vLLM server: they go to the file, not the status line.
FORWARDED = re.compile(r"^\[vllm\]|^\s*$")
# The terminal's lines are at most this wide (a TTY's own width if narrower); the log file has them whole.
LINE_WIDTH = 120
# Each asset's headline numbers on its result line, in this order (patterns over its metadata keys);
# every other number is in the log file and the UI.
HEADLINES = {
    "prompts": ("rows_kept", "train", "validation", "heldout"),
    "reasoning_samples": ("ok", "output_tokens_per_s", "capture_s"),
    "token_sequences": ("samples", "tokens", "max_seq_len"),
    "hidden_states": ("files", "tokens", "tokens_per_s"),
    "eagle3_checkpoint": ("epochs_run", "val_loss", "val_full_acc_0"),
    "eagle3_eval": (r"[^/]+\]/acceptance_length",),
}


class StageDisplay:
    """Status lines for the stages of a run, on ``terminal``. ``redraw`` (a TTY): the running stage's line is
    rewritten in place at most ``per_s`` times a second; otherwise only result lines are printed. ``clock``
    gives the seconds that status and result lines show."""

    def __init__(self, terminal: TextIO, redraw: bool, per_s: float = 4.0, clock: Callable[[], float] = time.monotonic):
        self.terminal = terminal
        self.clock = clock
        self.redraw = redraw
        self.min_gap_s = 1.0 / per_s
        self.started: dict[str, float] = {}  # each stage's first status in its current run
        self.done: set[str] = set()
        self.shown = ""
        self.last_draw = 0.0

    def progress(self, stage: str, message: str) -> None:
        """The stage's latest progress ``message`` (a log line of the asset)."""
        now = self.clock()
        if stage in self.done:  # a later run of a stage that has printed its result
            self.done.discard(stage)
            self.started.pop(stage, None)
        self.started.setdefault(stage, now)
        if not self.redraw or FORWARDED.search(message) or now - self.last_draw < self.min_gap_s:
            return
        self.last_draw = now
        self._draw(self.status(stage, message, now - self.started[stage]))

    def width(self) -> int:
        return min(LINE_WIDTH, shutil.get_terminal_size((LINE_WIDTH, 20)).columns - 1) if self.redraw else LINE_WIDTH

    def status(self, stage: str, message: str, elapsed_s: float) -> str:
        width = self.width()
        count = COUNT.search(message)
        bar = ""
        if count and int(count.group(2)) > 0:
            done, total = int(count.group(1)), int(count.group(2))
            filled = min(20, 20 * done // total)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] "
        text = f"{stage:<18} {elapsed_s:5.0f}s {bar}{message.splitlines()[0] if message else ''}"
        return text[:width]

    def result(self, stage: str, text: str) -> None:
        """A stage's result line, with the seconds since its first status (a later run of the same stage,
        e.g. another partition's prompts, counts from its own)."""
        now = self.clock()
        elapsed = now - self.started.get(stage, now)
        self.done.add(stage)
        self.line(f"{stage:<18} {elapsed:5.0f}s done: {text}")

    def line(self, text: str) -> None:
        """A line that stays, cut to :meth:`width` (the log file has it whole): clears the status line first."""
        self._draw("")
        width = self.width()
        if len(text) > width:
            text = text[: width - 1] + "…"
        print(text, file=self.terminal, flush=True)

    def _draw(self, text: str) -> None:
        if not self.redraw or text == self.shown:
            return
        pad = max(0, len(self.shown) - len(text))
        self.terminal.write("\r" + text + " " * pad + ("\r" + text if pad else ""))
        self.terminal.flush()
        self.shown = text


def _number(key: str, value: float | int) -> str:
    key = key.removesuffix("/acceptance_length") + " τ" if key.endswith("/acceptance_length") else key
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def materialization_line(mat: dg.AssetMaterialization, headline_only: bool = False) -> str:
    """``asset[partition] version V: k=v, ...`` — its numeric metadata and data version; with
    ``headline_only``, ``[partition] version: ...`` with the asset's :data:`HEADLINES` numbers only (all
    of them for an asset without) and the version's first 8 characters: the result line that follows the
    stage's name on the terminal."""
    asset = mat.asset_key.to_user_string()
    numbers = {
        k: v.value
        for k, v in mat.metadata.items()
        if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))
        and not k.startswith("dagster/")
        and v.value  # zero counters (e.g. skip reasons that never happened) are noise here
    }
    if headline_only and asset in HEADLINES:
        numbers = {k: numbers[k] for pattern in HEADLINES[asset] for k in numbers if re.fullmatch(pattern, k)}
    version = mat.tags.get("dagster/data_version", "?") if mat.tags else "?"
    partition = f"[{mat.partition}]" if mat.partition else ""
    shown = ", ".join(_number(k, v) for k, v in numbers.items())
    if headline_only:
        return f"{partition} {version[:8]}: {shown}".lstrip()
    return f"{asset}{partition} version {version}: {shown}"


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
            mat = event.step_materialization_data.materialization
            self.display.result(step, materialization_line(mat, headline_only=True))


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
