"""Acceptance measured by vLLM itself: greedy requests to a server that speculates with the draft.

The requests go through the same capture engine as ``reasoning_samples`` (one AsyncOpenAI client per
base URL, bounded concurrency, retries, exact token ids) with temperature 0, so the completions are
the verifier's own greedy outputs — speculative decoding with greedy verification never changes
them. Acceptance comes from the difference of vLLM's spec-decode counters before and after the
requests (see :mod:`eagle_assets.evaluation.metrics`); nothing is counted on the client side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eagle_assets.evaluation.metrics import SpecDecodeCounters, fetch_counters
from eagle_assets.generation.engine import CaptureEngine, ClientSettings, PromptRequest, Sampling
from eagle_assets.generation.progress import Progress, report_every

GREEDY = dict(temperature=0.0, top_p=1.0)


@dataclass
class ServedRun:
    """What one batch of greedy requests did on the server(s)."""

    counters: SpecDecodeCounters  # the delta over this run only
    rows: list[dict]  # one capture row per prompt (status, prompt_token_ids, token_ids, ...)
    wall_s: float
    server_model: str
    vllm_version: str

    @property
    def ok_rows(self) -> list[dict]:
        return [r for r in self.rows if r["status"] == "ok"]

    @property
    def completion_tokens(self) -> int:
        return sum(len(r["token_ids"]) for r in self.ok_rows)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0


def settled_counters(base_urls: Sequence[str], timeout_s: float = 30.0, poll_s: float = 0.5) -> SpecDecodeCounters:
    """Counters once no request is running and two reads agree (the last step's stats may trail the
    last response by one engine iteration)."""
    deadline = time.monotonic() + timeout_s
    previous = fetch_counters(list(base_urls))
    while True:
        time.sleep(poll_s)
        current = fetch_counters(list(base_urls))
        if (current.requests_running == 0 and current == previous) or time.monotonic() >= deadline:
            return current
        previous = current


def run_greedy(
    base_urls: Sequence[str],
    requests: Sequence[PromptRequest],
    max_tokens: int,
    log: Callable[[str], None],
    concurrency: int = 64,
    request_timeout_s: float = 600.0,
    progress_interval_s: float = 5.0,
    api_key: str | None = None,
) -> ServedRun:
    """Send every request greedily and return the rows with the counter delta they caused.

    The server(s) must be idle otherwise: anything else they decode meanwhile lands in the delta.
    """
    engine = CaptureEngine(
        base_urls,
        Sampling(max_tokens=max_tokens, **GREEDY),
        ClientSettings(concurrency=concurrency, request_timeout_s=request_timeout_s, api_key=api_key),
    )
    rows: list[dict] = []
    progress = Progress(total=len(requests), label="eagle3_eval")
    before = settled_counters(base_urls)

    async def main() -> float:
        await engine.identify()
        progress.started = time.monotonic()
        ticker = asyncio.create_task(report_every(progress_interval_s, progress, log, lambda: None))
        try:
            await engine.run(requests, rows.append, progress)
        finally:
            ticker.cancel()
        return time.monotonic() - progress.started

    wall_s = asyncio.run(main())
    log(progress.line())
    counters = settled_counters(base_urls) - before
    return ServedRun(counters, rows, wall_s, engine.model or "", engine.vllm_version)
