"""POSTing chat completions at ~200 in flight: pooled connections, timeouts, retries with backoff.

The capture's hot path. It does what the OpenAI SDK's client did for it — a per-request timeout,
retries with exponential backoff and jitter on 408/409/429/5xx, timeouts and connection errors,
``Retry-After`` honoured — over one ``aiohttp`` session per base URL. Measured against a canned server
(``benchmarks/capture_client_cpu.py``), the SDK's request building and its httpx layer were three
quarters of the capture's client CPU, and client CPU is taken from the vLLM server whenever both share
a host. A caller that hands in an httpx transport (tests, a custom proxy) gets the same retry policy
over an httpx client on that transport instead.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from dataclasses import dataclass

import aiohttp

from eagle_assets.reasoning_samples.sdk_http import httpx

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # and every 5xx
INITIAL_BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0


class HTTPStatusError(Exception):
    """A non-retryable status, or a retryable one that outlived the retries."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class NoAnswer(Exception):
    """No HTTP answer at all after the retries: ``kind`` is ``timeout`` or ``connection``."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


@dataclass
class _Reply:
    status: int
    retry_after: str | None
    body: bytes


def _retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def _error_message(body: bytes) -> str:
    """vLLM's (OpenAI's) ``{"error": {"message": …}}``, else the body's start."""
    try:
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    except (ValueError, AttributeError):
        pass
    return body[:500].decode(errors="replace")


def _backoff_s(retry: int, retry_after: str | None, initial_s: float) -> float:
    if retry_after:
        try:
            return min(max(float(retry_after), 0.0), 60.0)
        except ValueError:
            pass
    return min(initial_s * 2**retry, MAX_BACKOFF_S) * (1 - 0.25 * random.random())


class ChatPoster:
    """POSTs JSON bodies to one base URL's ``/chat/completions``; ``attempts`` counts HTTP attempts."""

    def __init__(
        self,
        base_url: str,
        connections: int,
        timeout_s: float,
        max_retries: int,
        headers: dict[str, str],
        tls: ssl.SSLContext,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_s: float = INITIAL_BACKOFF_S,
    ):
        self.url = f"{base_url}/chat/completions"
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
        self.attempts = 0
        self._tls, self._connections, self._transport = tls, connections, transport
        self._session: aiohttp.ClientSession | None = None
        self._httpx: httpx.AsyncClient | None = None

    async def post(self, body: dict) -> bytes:
        """The answer's body; raises :class:`HTTPStatusError` or :class:`NoAnswer` once retries are spent."""
        data = json.dumps(body).encode()
        for retry in range(self.max_retries + 1):
            last = retry == self.max_retries
            self.attempts += 1
            try:
                reply = await (self._send_httpx(data) if self._transport else self._send(data))
            except (asyncio.TimeoutError, aiohttp.ServerTimeoutError, httpx.TimeoutException):
                failure = NoAnswer("timeout", f"no answer within {self.timeout_s:g}s")
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, httpx.TransportError) as exc:
                failure = NoAnswer("connection", repr(exc))
                failure.__cause__ = exc
            else:
                if reply.status < 300:
                    return reply.body
                if not _retryable(reply.status) or last:
                    raise HTTPStatusError(reply.status, _error_message(reply.body))
                await asyncio.sleep(_backoff_s(retry, reply.retry_after, self.backoff_s))
                continue
            if last:
                raise failure
            await asyncio.sleep(_backoff_s(retry, None, self.backoff_s))
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt

    async def _send(self, data: bytes) -> _Reply:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections + 8, ssl=self._tls),
                # Per read, like the SDK's httpx timeout: a long generation is fine while the server answers.
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=min(self.timeout_s, 60.0), sock_read=self.timeout_s
                ),
            )
        async with self._session.post(self.url, data=data, headers=self.headers) as response:
            return _Reply(response.status, response.headers.get("Retry-After"), await response.read())

    async def _send_httpx(self, data: bytes) -> _Reply:
        if self._httpx is None:
            self._httpx = httpx.AsyncClient(transport=self._transport, timeout=self.timeout_s)
        response = await self._httpx.post(self.url, content=data, headers=self.headers)
        return _Reply(response.status_code, response.headers.get("Retry-After"), response.content)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._httpx is not None:
            await self._httpx.aclose()
