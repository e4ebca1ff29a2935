"""The async capture engine: every prompt sent once to the verifier, ~200 in flight, exact tokens kept.

Requests go through :mod:`eagle_assets.reasoning_samples.chat_http` (per-request timeouts, retries with
exponential backoff and jitter on 408/409/429/5xx, timeouts and connection errors); the engine adds
what a long capture needs on top: one connection pool per base URL with least-loaded dispatch
(data-parallel replicas), a bounded worker pool, a per-prompt error row instead of a crash, and an
early stop when the server is clearly gone (so a dead server does not burn every prompt's retries).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from eagle_assets.reasoning_samples.chat_http import INITIAL_BACKOFF_S, ChatPoster, HTTPStatusError, NoAnswer
from eagle_assets.reasoning_samples.parsing import THINK_CLOSE, THINK_OPEN, MalformedResponse, parse_completion
from eagle_assets.reasoning_samples.progress import Progress
from eagle_assets.reasoning_samples.quality import ThinkMarkers
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.turns import Answer, Conversation, turn_context

ERROR_TEXT_LIMIT = 2000


class ServerUnavailable(RuntimeError):
    """No usable vLLM server behind the base URLs (unreachable, or died mid-run)."""


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 200
    request_timeout_s: float = 1800.0
    max_retries: int = 4
    # The first retry's wait, doubled at each further retry (up to 8 s) unless the server says Retry-After.
    retry_backoff_s: float = INITIAL_BACKOFF_S
    # This many consecutive connection failures or timeouts (after retries) end the run early.
    max_consecutive_failures: int = 32
    api_key: str | None = None


@dataclass
class _Endpoint:
    base_url: str
    poster: ChatPoster
    in_flight: int = 0


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` → ``http://h:p`` (where vLLM serves ``/health`` and ``/version``)."""
    return base_url.rstrip("/").removesuffix("/v1")


class CaptureEngine:
    """Send prompts to one or more OpenAI-compatible base URLs and turn each answer into a row."""

    def __init__(
        self,
        base_urls: Sequence[str],
        sampling: Sampling,
        settings: ClientSettings = ClientSettings(),
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        if not base_urls:
            raise ValueError("CaptureEngine needs at least one base URL")
        if settings.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {settings.concurrency}")
        self.base_urls = [url.rstrip("/") for url in base_urls]
        self.sampling = sampling
        self.settings = settings
        self._transport = transport
        self._sampling_json = sampling.as_json()
        self._posters: list[ChatPoster] = []
        self.model: str | None = None
        self.vllm_version: str = "unknown"
        self.think_markers: ThinkMarkers | None = None
        self._tls = None  # one TLS context for every client: each new one loads the CA bundle (~50 ms)

    def _verify(self):
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return self._tls

    def _headers(self) -> dict:
        key = self.settings.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def identify(self) -> tuple[str, str]:
        """Check every base URL answers ``/v1/models``; return (served model, vLLM version)."""
        models = []
        async with httpx.AsyncClient(
            transport=self._transport, timeout=30.0, headers=self._headers(), verify=self._verify()
        ) as http:
            for url in self.base_urls:
                try:
                    response = await http.get(f"{url}/models")
                    response.raise_for_status()
                    models.append(response.json()["data"][0]["id"])
                except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                    raise ServerUnavailable(
                        f"cannot use the vLLM server at {url}: GET {url}/models failed ({exc!r}). "
                        "Check that the server is running and the base URL (ending in /v1) is right."
                    ) from exc
            if len(set(models)) > 1:
                raise ServerUnavailable(
                    f"base URLs serve different models {dict(zip(self.base_urls, models))}; "
                    "every replica must serve the same verifier"
                )
            try:
                response = await http.get(f"{server_root(self.base_urls[0])}/version")
                self.vllm_version = response.json().get("version", "unknown")
            except (httpx.HTTPError, ValueError):
                self.vllm_version = "unknown"  # not vLLM, or an older one: recorded as such
        self.model = models[0]
        return self.model, self.vllm_version

    async def resolve_think_markers(self) -> ThinkMarkers | None:
        """The ids of ``<think>``/``</think>`` in the served model's own tokenizer (vLLM's ``/tokenize``),
        kept for every row's thinking span; None when the server cannot tokenize or a marker is not
        one token (rows then take the reasoning parser's split)."""
        ids = []
        async with httpx.AsyncClient(
            transport=self._transport, timeout=30.0, headers=self._headers(), verify=self._verify()
        ) as http:
            for marker in (THINK_OPEN, THINK_CLOSE):
                try:
                    response = await http.post(
                        f"{server_root(self.base_urls[0])}/tokenize",
                        json={"model": self.model, "prompt": marker, "add_special_tokens": False},
                    )
                    response.raise_for_status()
                    tokens = response.json()["tokens"]
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    return None
                if len(tokens) != 1:
                    return None
                ids.append(int(tokens[0]))
        self.think_markers = ThinkMarkers(*ids)
        return self.think_markers

    @property
    def http_attempts(self) -> int:
        """HTTP attempts of every capture request so far (retries included)."""
        return sum(poster.attempts for poster in self._posters)

    def _poster(self, base_url: str, connections: int) -> ChatPoster:
        poster = ChatPoster(
            base_url,
            connections,
            self.settings.request_timeout_s,
            self.settings.max_retries,
            self._headers(),
            self._verify(),
            transport=self._transport,
            backoff_s=self.settings.retry_backoff_s,
        )
        self._posters.append(poster)
        return poster

    async def run(
        self, requests: Iterable[PromptRequest | Conversation], sink: Callable[[dict], None], progress: Progress
    ) -> None:
        """Capture every request; ``sink`` gets one row per prompt or turn (ok or error) as it finishes.

        A :class:`~eagle_assets.reasoning_samples.turns.Conversation` holds one worker for its turns, asked
        in order, each with the answers before it; it stops at a turn that fails (the next
        materialization resumes there). Different conversations run concurrently.
        """
        if self.model is None:
            await self.identify()
        connections = -(-self.settings.concurrency // len(self.base_urls))
        endpoints = [_Endpoint(url, self._poster(url, connections)) for url in self.base_urls]
        pending = iter(requests)
        consecutive_failures = 0

        asked = 0

        async def ask(request: PromptRequest) -> dict:
            nonlocal consecutive_failures, asked
            # Least loaded; ties go round-robin (equally loaded replicas share the work in turn).
            asked += 1
            start = asked % len(endpoints)
            endpoint = min(endpoints[start:] + endpoints[:start], key=lambda e: e.in_flight)
            endpoint.in_flight += 1
            progress.in_flight += 1
            try:
                row, reached_server = await self._capture(endpoint, request)
            finally:
                endpoint.in_flight -= 1
                progress.in_flight -= 1
            sink(row)
            progress.record(row)
            consecutive_failures = 0 if reached_server else consecutive_failures + 1
            if consecutive_failures >= self.settings.max_consecutive_failures:
                raise ServerUnavailable(
                    f"{consecutive_failures} requests in a row failed without a server answer "
                    f"(last: {row['error']}); stopping early. Finished samples are kept; "
                    "re-materialize once the server is back to continue."
                )
            return row

        async def converse(conversation: Conversation) -> None:
            answers = list(conversation.answers)
            for turn in range(conversation.next_turn, conversation.next_turn + conversation.turns_left):
                context = turn_context(conversation.messages, turn, answers)
                row = await ask(
                    PromptRequest(conversation.prompt_id, context, conversation.split, conversation.sampling, turn)
                )
                if row["status"] != "ok":
                    return  # the later turns need this answer in their context
                answers.append(Answer(row["content"], row["reasoning"]))

        async def worker() -> None:
            for item in pending:  # one shared iterator: each prompt goes to exactly one worker
                if isinstance(item, Conversation):
                    await converse(item)
                else:
                    await ask(item)

        workers = [asyncio.create_task(worker()) for _ in range(self.settings.concurrency)]
        try:
            done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # re-raise the first failure
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            for endpoint in endpoints:
                await endpoint.poster.close()

    async def _capture(self, endpoint: _Endpoint, request: PromptRequest) -> tuple[dict, bool]:
        """One prompt → (row, whether the server answered at all)."""
        sampling = request.sampling or self.sampling
        extra_body = {"return_token_ids": True}
        if sampling.chat_template_kwargs:
            extra_body["chat_template_kwargs"] = sampling.chat_template_kwargs
        started = time.monotonic()
        row = {
            "prompt_id": request.prompt_id,
            "turn": request.turn,
            "split": request.split,
            "sampling": self._sampling_json if request.sampling is None else sampling.as_json(),
            "server_model": self.model,
            "vllm_version": self.vllm_version,
            "base_url": endpoint.base_url,
        }
        reached_server = True
        try:
            body = {
                "model": self.model,
                "messages": request.messages,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "max_tokens": sampling.max_tokens,
                **extra_body,
            }
            seed = sampling.request_seed(request.prompt_id, request.turn)
            if seed is not None:
                body["seed"] = seed
            # The raw JSON: vLLM's extra fields (token ids, reasoning) are plain keys there.
            row.update(parse_completion(json.loads(await endpoint.poster.post(body)), self.think_markers))
            row["status"], row["error"] = "ok", None
        except HTTPStatusError as exc:
            row["status"], row["error"] = "error", str(exc)
        except NoAnswer as exc:
            reached_server = False
            row["status"] = "error"
            row["error"] = (
                f"timeout: {exc} (after {self.settings.max_retries} retries)"
                if exc.kind == "timeout"
                else f"connection error to {endpoint.base_url} after {self.settings.max_retries} retries: {exc}"
            )
        except (ValueError, MalformedResponse) as exc:  # json.JSONDecodeError is a ValueError
            row["status"], row["error"] = "error", f"malformed response: {exc}"
        if row["error"]:
            row["error"] = row["error"][:ERROR_TEXT_LIMIT]
        row["latency_s"] = time.monotonic() - started
        row["finished_at"] = time.time()
        return row, reached_server
