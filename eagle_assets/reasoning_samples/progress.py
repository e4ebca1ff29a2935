"""Counts and rates of a capture, reported as one log line every few seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Progress:
    """Running totals; :meth:`line` formats them for the Dagster log."""

    total: int
    label: str = "reasoning_samples"
    done: int = 0
    ok: int = 0
    errors: int = 0
    truncated: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    in_flight: int = 0
    started: float = field(default_factory=time.monotonic)

    def record(self, row: dict) -> None:
        self.done += 1
        if row["status"] == "ok":
            self.ok += 1
            self.truncated += bool(row["truncated"])
            self.completion_tokens += row["completion_tokens"] or 0
            self.prompt_tokens += row["prompt_tokens"] or 0
        else:
            self.errors += 1

    @property
    def elapsed_s(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)

    @property
    def requests_per_s(self) -> float:
        return self.done / self.elapsed_s

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed_s

    def line(self) -> str:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.requests_per_s
        eta = f"{(self.total - self.done) / rate:.0f}s" if rate > 0 else "?"
        return (
            f"{self.label}: {self.done}/{self.total} done ({pct:.1f}%), {rate:.1f} req/s, "
            f"{self.tokens_per_s:.0f} output tok/s, errors {self.errors}, truncated {self.truncated}, "
            f"in flight {self.in_flight}, eta {eta}"
        )


async def report_every(
    interval_s: float, progress: Progress, log: Callable[[str], None], on_tick: Callable[[], None] | None = None
) -> None:
    """Log ``progress`` every ``interval_s`` seconds until cancelled; ``on_tick`` runs each time too."""
    while True:
        await asyncio.sleep(interval_s)
        log(progress.line())
        if on_tick is not None:
            on_tick()
