"""The capture engine: exact tokens, retries and errors, several servers, seeds.

The engine is handed an ``httpx.MockTransport``, so its real retry/backoff policy (``chat_http``) runs
against scripted answers; one test goes through its aiohttp pool and real sockets (a local HTTP server),
and the real vLLM server is exercised in tests/integration/reasoning_samples/.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pytest

from eagle_assets.reasoning_samples.capture import capture
from eagle_assets.reasoning_samples.engine import CaptureEngine, ClientSettings, ServerUnavailable
from eagle_assets.reasoning_samples.progress import Progress
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import done_prompt_ids
from tests.helpers.http import LocalServer, Reply, Request


def body(message: dict, finish_reason: str = "stop", token_ids=(5, 6, 2)) -> dict:
    return {
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "token_ids": list(token_ids)}],
        "prompt_token_ids": [1, 2, 3, 4],
        "usage": {"prompt_tokens": 4, "completion_tokens": len(token_ids)},
    }


class FakeServer:
    """An httpx handler speaking just enough of vLLM's API; ``script`` decides each completion."""

    def __init__(self, script):
        self.script = script
        self.attempts: Counter = Counter()
        self.hosts: Counter = Counter()
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if request.url.path == "/tokenize":
            return httpx.Response(404)  # no marker ids: rows take the reasoning parser's split
        payload = json.loads(request.content)
        self.bodies.append(payload)
        key = payload["messages"][0]["content"]
        self.attempts[key] += 1
        self.hosts[request.url.host] += 1
        return self.script(key, self.attempts[key])


def requests(n: int) -> list[PromptRequest]:
    return [PromptRequest(f"{i:016x}", [{"role": "user", "content": f"q{i}"}], "train") for i in range(n)]


def run_engine(script, n=4, urls=("http://a/v1",), **settings):
    server = FakeServer(script)
    engine = CaptureEngine(
        list(urls),
        Sampling(max_tokens=16, chat_template_kwargs={"enable_thinking": True}),
        ClientSettings(**{"concurrency": 4, "max_retries": 3, "retry_backoff_s": 0.01, **settings}),
        transport=httpx.MockTransport(server),
    )
    rows: list[dict] = []
    asyncio.run(engine.run(requests(n), rows.append, Progress(total=n)))
    return server, engine, sorted(rows, key=lambda r: r["prompt_id"])


def ok_answer(_key, _attempt):
    return httpx.Response(200, json=body({"reasoning": "think", "content": "4"}))


def test_every_prompt_gets_one_ok_row_with_exact_tokens_and_the_request_asks_for_them():
    server, engine, rows = run_engine(ok_answer)
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert rows[0]["token_ids"] == [5, 6, 2] and rows[0]["server_model"] == "tiny"
    assert rows[0]["vllm_version"] == "0.32.0"
    assert json.loads(rows[0]["sampling"])["max_tokens"] == 16
    sent = server.bodies[0]
    assert sent["return_token_ids"] is True and sent["chat_template_kwargs"] == {"enable_thinking": True}
    assert engine.http_attempts == 4


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_transient_statuses_are_retried_until_they_succeed(status):
    def flaky(_key, attempt):
        return httpx.Response(status, json={"error": "busy"}) if attempt <= 2 else ok_answer(_key, attempt)

    server, _engine, rows = run_engine(flaky, n=2)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert set(server.attempts.values()) == {3}


def test_timeouts_are_retried():
    def slow_first(key, attempt):
        if attempt == 1:
            raise httpx.ReadTimeout("no answer in time")
        return ok_answer(key, attempt)

    server, _, rows = run_engine(slow_first, n=2)
    assert [r["status"] for r in rows] == ["ok", "ok"] and set(server.attempts.values()) == {2}


def test_bad_request_is_recorded_per_sample_and_not_retried():
    def too_long(key, attempt):
        if key == "q1":
            return httpx.Response(400, json={"error": {"message": "maximum context length is 4096 tokens"}})
        return ok_answer(key, attempt)

    server, _, rows = run_engine(too_long)
    assert [r["status"] for r in rows] == ["ok", "error", "ok", "ok"]
    assert "HTTP 400" in rows[1]["error"] and "maximum context length" in rows[1]["error"]
    assert server.attempts["q1"] == 1


@pytest.mark.parametrize(
    "response, reason",
    [
        (httpx.Response(200, text="{not json"), "malformed response"),
        (httpx.Response(200, json={"model": "tiny", "choices": []}), "no choices"),
    ],
)
def test_malformed_answers_are_recorded_per_sample(response, reason):
    _, _, rows = run_engine(lambda key, attempt: response if key == "q0" else ok_answer(key, attempt), n=2)
    assert rows[0]["status"] == "error" and reason in rows[0]["error"]
    assert rows[1]["status"] == "ok"


def test_a_dead_server_stops_the_run_early_instead_of_burning_every_prompt():
    def refused(_key, _attempt):
        raise httpx.ConnectError("connection refused")

    with pytest.raises(ServerUnavailable, match="in a row failed"):
        run_engine(refused, n=50, max_retries=0, max_consecutive_failures=5, concurrency=2)


def test_load_spreads_over_several_base_urls():
    server, _, rows = run_engine(ok_answer, n=40, urls=("http://a/v1", "http://b/v1"))
    assert len(rows) == 40 and server.hosts["a"] > 0 and server.hosts["b"] > 0
    assert {r["base_url"] for r in rows} == {"http://a/v1", "http://b/v1"}


def test_unreachable_base_url_is_named_in_the_error():
    def nothing_listens(request):
        raise httpx.ConnectError("connection refused")

    engine = CaptureEngine(["http://127.0.0.1:9/v1"], Sampling(), transport=httpx.MockTransport(nothing_listens))
    with pytest.raises(ServerUnavailable, match=r"http://127.0.0.1:9/v1"):
        asyncio.run(engine.identify())


def test_capture_writes_every_finished_row_even_when_the_run_fails(tmp_path):
    def dies_after_three(key, attempt):
        if int(key[1:]) >= 3:
            raise httpx.ConnectError("connection refused")
        return ok_answer(key, attempt)

    server = FakeServer(dies_after_three)
    settings = ClientSettings(concurrency=1, max_retries=0, max_consecutive_failures=2)
    with pytest.raises(ServerUnavailable):
        capture(
            ["http://a/v1"],
            requests(10),
            tmp_path,
            Sampling(),
            settings,
            log=lambda _: None,
            rows_per_shard=100,
            transport=httpx.MockTransport(server),
        )
    assert done_prompt_ids(tmp_path) == {f"{i:016x}" for i in range(3)}


def test_per_prompt_seeds_are_stable_and_distinct():
    sampling = Sampling(seed=7)
    assert sampling.request_seed("a") == Sampling(seed=7).request_seed("a") != sampling.request_seed("b")
    assert Sampling().request_seed("a") is None


# The tests above swap in a mock transport; this one goes through the engine's own aiohttp pool and real
# sockets, whose errors must reach the rows as the same timeouts and connection errors.
def test_real_sockets_answers_timeouts_and_a_closed_port():
    def answer(request: Request) -> Reply | None:
        if request.path.endswith("/models"):
            return Reply.of_json({"data": [{"id": "tiny"}]})
        if request.path != "/v1/chat/completions":
            return Reply(404)
        if request.json()["messages"][0]["content"] == "q1":
            time.sleep(5)  # past the request timeout
        return Reply.of_json(body({"reasoning": "think", "content": "4"}))

    with LocalServer(answer) as server:
        url = server.url
        engine = CaptureEngine(
            [url], Sampling(max_tokens=16), ClientSettings(concurrency=2, max_retries=0, request_timeout_s=0.5)
        )
        rows: list[dict] = []
        asyncio.run(engine.run(requests(3), rows.append, Progress(total=3)))
    closed = CaptureEngine([url], Sampling(), ClientSettings(max_retries=0))
    with pytest.raises(ServerUnavailable, match=url):
        asyncio.run(closed.identify())
    rows = sorted(rows, key=lambda r: r["prompt_id"])
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[0]["token_ids"] == [5, 6, 2] and rows[1]["error"].startswith("timeout")
