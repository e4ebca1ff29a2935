"""Acceptance measured by vLLM itself: greedy requests to a server that speculates with the draft.

The requests go through the same capture engine as ``reasoning_samples`` (one AsyncOpenAI client per
base URL, bounded concurrency, retries, exact token ids) with temperature 0, so the completions are
the verifier's own greedy outputs — speculative decoding with greedy verification never changes
them. Acceptance comes from the difference of vLLM's spec-decode counters before and after the
requests (see :mod:`eagle_assets.eagle3_eval.metrics`).

A server started with vLLM's per-request metrics (``--enable-per-request-metrics`` and
``--per-request-spec-decode-metrics detailed``) also answers each request with its own speculative-decoding
statistics (``metrics.speculative_decoding``: drafts proposed and accepted, a histogram of accepted draft
tokens per verify step and, detailed, the accepted/proposed count of every verify step in order); each row
keeps them as ``spec_decoding`` (None when the server sent none), next to the server's timing
(``server_metrics``). The counters stay the cross-check of their sums.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters, fetch_counters
from eagle_assets.reasoning_samples.engine import CaptureEngine, ClientSettings
from eagle_assets.reasoning_samples.progress import Progress, report_every
from eagle_assets.reasoning_samples.quality import ThinkMarkers
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.turns import Conversation

GREEDY = dict(temperature=0.0, top_p=1.0)
# vLLM 0.32 names the draft it serves only in its engine config at /server_info, which it serves with
# VLLM_SERVER_DEV_MODE=1; /v1/models lists the verifier alone and /metrics only counts drafts.
SERVER_INFO = "/server_info?config_format=json"


class ServedDraftError(RuntimeError):
    """The server cannot be shown to speculate with the checkpoint under evaluation."""


def served_speculative_config(base_url: str, api_key: str | None = None) -> dict | None:
    """The ``speculative_config`` the vLLM server at ``base_url`` runs with (None: it speculates with
    nothing), read from its ``/server_info``; raises :class:`ServedDraftError` when it does not say."""
    import httpx

    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{root}{SERVER_INFO}", headers=headers, timeout=30.0)
    except httpx.HTTPError as exc:
        raise ServedDraftError(f"{root}/server_info could not be read ({exc!r})") from None
    try:
        response.raise_for_status()  # 404: the server is not in dev mode
        config = response.json().get("vllm_config") or {}
    except (httpx.HTTPStatusError, ValueError):  # ValueError: the body is not JSON
        answer = f"HTTP {response.status_code} {response.reason_phrase}" if response.is_error else "no JSON"
        raise ServedDraftError(
            f"{root}{SERVER_INFO} answered {answer}, so the server at {base_url} does not say which draft it "
            "serves: vLLM serves its engine config at /server_info only with VLLM_SERVER_DEV_MODE=1 in the "
            "server's environment. Restart it so, or let eagle3_eval start its own server (vllm_server mode "
            "'managed')"
        ) from None
    return config.get("speculative_config") if isinstance(config, dict) else None


def confirm_serves_checkpoint(
    base_urls: Sequence[str], checkpoint, num_speculative_tokens: int, api_key: str | None = None
) -> None:
    """Refuse (:class:`ServedDraftError`) unless every server speculates with ``checkpoint`` as its
    eagle3 draft and ``num_speculative_tokens`` tokens. A folder elsewhere counts when it has the same
    name: kept checkpoints are named by their content hash."""
    from pathlib import Path

    checkpoint = Path(checkpoint)
    for url in base_urls:
        spec = served_speculative_config(url, api_key)
        if not spec:
            raise ServedDraftError(
                f"the server at {url} serves no speculative draft; start it with --speculative-config "
                f'\'{{"method": "eagle3", "model": "{checkpoint}", '
                f'"num_speculative_tokens": {num_speculative_tokens}}}\''
            )
        model = str(spec.get("model") or "")
        same = model and (Path(model).resolve() == checkpoint.resolve() or Path(model).name == checkpoint.name)
        found = f"method {spec.get('method')!r}, model {model!r}, K {spec.get('num_speculative_tokens')}"
        if not same or spec.get("method") != "eagle3" or spec.get("num_speculative_tokens") != num_speculative_tokens:
            raise ServedDraftError(
                f"the server at {url} speculates with {found}, not this checkpoint "
                f"({checkpoint}, eagle3, K {num_speculative_tokens}): restart it with that draft"
            )


@dataclass
class ServedRun:
    """What one batch of greedy requests did on the server(s)."""

    counters: SpecDecodeCounters  # the delta over this run only
    rows: list[dict]  # one capture row per prompt (status, prompt_token_ids, token_ids, ...)
    wall_s: float
    server_model: str
    vllm_version: str
    think_markers: ThinkMarkers | None = None  # the served model's thinking-marker ids, where /tokenize names them

    @property
    def ok_rows(self) -> list[dict]:
        return [r for r in self.rows if r["status"] == "ok"]

    @property
    def completion_tokens(self) -> int:
        return sum(len(r["token_ids"]) for r in self.ok_rows)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0


class _Recording:
    """A poster that keeps the last answer it returned (the raw body the engine parses)."""

    def __init__(self, poster):
        self.poster = poster
        self.body: bytes | None = None

    async def post(self, body: dict) -> bytes:
        self.body = await self.poster.post(body)
        return self.body


def response_metrics(body: bytes | None) -> tuple[dict | None, dict | None]:
    """(``metrics.speculative_decoding``, the rest of ``metrics``) of a chat-completion body; None where absent."""
    try:
        metrics = json.loads(body or b"null") or {}
        metrics = metrics.get("metrics") if isinstance(metrics, dict) else None
    except ValueError:
        return None, None
    if not isinstance(metrics, dict):
        return None, None
    spec = metrics.get("speculative_decoding")
    timing = {k: v for k, v in metrics.items() if k != "speculative_decoding" and v is not None}
    return (spec if isinstance(spec, dict) else None), (timing or None)


class MeteredEngine(CaptureEngine):
    """The capture engine, keeping each answer's per-request metrics in its row (``spec_decoding``,
    ``server_metrics``): the capture's rows have no place for them."""

    async def _capture(self, endpoint, request):
        recording = _Recording(endpoint.poster)
        row, reached_server = await super()._capture(replace(endpoint, poster=recording), request)
        spec, timing = response_metrics(recording.body) if row["status"] == "ok" else (None, None)
        row["spec_decoding"], row["server_metrics"] = spec, timing
        return row, reached_server


def request_count(items: Sequence[PromptRequest | Conversation]) -> int:
    """Requests the items make: one per prompt, one per turn of a conversation."""
    return sum(item.turns_left if isinstance(item, Conversation) else 1 for item in items)


# Between two reads of the counters while they settle.
SETTLE_POLL_S = 0.5


def settled_counters(
    base_urls: Sequence[str], timeout_s: float = 30.0, poll_s: float | None = None
) -> SpecDecodeCounters:
    """Counters once no request is running and two reads agree (the last step's stats may trail the
    last response by one engine iteration)."""
    poll_s = SETTLE_POLL_S if poll_s is None else poll_s
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
    requests: Sequence[PromptRequest | Conversation],
    max_tokens: int,
    log: Callable[[str], None],
    concurrency: int = 64,
    request_timeout_s: float = 600.0,
    progress_interval_s: float = 5.0,
    api_key: str | None = None,
) -> ServedRun:
    """Send every request greedily and return the rows with the counter delta they caused. A
    :class:`~eagle_assets.reasoning_samples.turns.Conversation` is asked turn by turn, each turn with the
    verifier's own answers before it (a row per turn).

    The server(s) must be idle otherwise: anything else they decode meanwhile lands in the delta.
    """
    engine = MeteredEngine(
        base_urls,
        Sampling(max_tokens=max_tokens, **GREEDY),
        ClientSettings(concurrency=concurrency, request_timeout_s=request_timeout_s, api_key=api_key),
    )
    rows: list[dict] = []
    progress = Progress(total=request_count(requests), label="eagle3_eval")
    before = settled_counters(base_urls)

    async def main() -> float:
        await engine.identify()
        await engine.resolve_think_markers()
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
    return ServedRun(counters, rows, wall_s, engine.model or "", engine.vllm_version, engine.think_markers)
