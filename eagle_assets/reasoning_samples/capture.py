"""One capture: engine + shard store + progress ticker, as the asset (and the benchmark) run it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.reasoning_samples.engine import CaptureEngine, ClientSettings
from eagle_assets.reasoning_samples.progress import Progress, report_every
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import ShardWriter
from eagle_assets.reasoning_samples.turns import Conversation


@dataclass
class CaptureReport:
    progress: Progress
    http_attempts: int
    server_model: str
    vllm_version: str
    shards_written: int


def capture(
    base_urls: Sequence[str],
    requests: Sequence[PromptRequest | Conversation],
    folder: Path,
    sampling: Sampling,
    settings: ClientSettings,
    log: Callable[[str], None],
    rows_per_shard: int = 256,
    flush_interval_s: float = 30.0,
    progress_interval_s: float = 5.0,
    label: str = "reasoning_samples",
    transport: httpx.AsyncBaseTransport | None = None,
    recipe: str | None = None,
    draft: str | None = None,
) -> CaptureReport:
    """Send ``requests`` and append one row per prompt (per turn of a conversation) to ``folder``'s shards,
    each naming ``recipe`` (the sample set's recipe id; None outside a sample set) and ``draft`` (JSON of the
    draft the server speculates with; None: none).

    Rows already finished stay on disk whatever happens (the writer is closed, i.e. flushed, on the
    way out of an exception too); a kill loses at most the rows buffered since the last shard.
    """
    engine = CaptureEngine(base_urls, sampling, settings, transport=transport)
    asks = sum(r.turns_left if isinstance(r, Conversation) else 1 for r in requests)
    progress = Progress(total=asks, label=label)
    writer = ShardWriter(folder, rows_per_shard=rows_per_shard, max_age_s=flush_interval_s, recipe=recipe, draft=draft)
    with writer:

        async def main() -> None:
            model, version = await engine.identify()
            markers = await engine.resolve_think_markers()
            thinking = (
                f"thinking markers {markers.start}/{markers.end}"
                if markers
                else "thinking markers unknown (the reasoning parser's split is used)"
            )
            turns = f" ({asks} turns)" if asks != len(requests) else ""
            log(
                f"{label}: {len(requests)} prompts{turns} to capture from {model} (vLLM {version}) at "
                f"{list(engine.base_urls)}, {settings.concurrency} in flight; {thinking}"
            )
            progress.started = time.monotonic()
            ticker = asyncio.create_task(report_every(progress_interval_s, progress, log, writer.flush_if_stale))
            try:
                await engine.run(requests, writer.add, progress)
            finally:
                ticker.cancel()

        try:
            asyncio.run(main())
        finally:
            log(progress.line())
    return CaptureReport(progress, engine.http_attempts, engine.model or "", engine.vllm_version, writer.shards_written)
