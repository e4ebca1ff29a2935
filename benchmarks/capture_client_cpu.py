"""Client CPU per request of the capture, against a canned server: what the client takes from the cores.

On one host the capture client and the vLLM server share the CPU (this project's CI and demo: 2 cores),
so each millisecond of client CPU per request is a millisecond the server does not get. A real server's
own noise hides that cost in a throughput benchmark (benchmarks/regeneration_vs_speculators.py); here
the server is a canned one in another process (vLLM-shaped answers: ``--completion-tokens`` token ids,
reasoning text, prompt ids; 20-80 ms per answer), so only the client side is measured:

- ``engine``: :func:`eagle_assets.reasoning_samples.capture.capture` as the asset runs it (its own aiohttp
  poster with retries, Parquet shards with exact token ids, progress);
- ``sdk-loop``: a bare loop through the OpenAI SDK (``client.post`` of the same body, the SDK's aiohttp
  transport, its retries): the SDK's cost per request alone, which the engine paid before
  ``eagle_assets.reasoning_samples.chat_http``;
- ``aiohttp-loop``: what speculators' ``regenerate-responses`` does per request, bare: one aiohttp
  session, ``--concurrency`` workers, ``json=`` payloads, ``response.json()``, a JSONL row of
  input ids and loss mask per answer.

Each variant runs in its own process (imports and start-up excluded: CPU is read from ``getrusage``
around the requests only), alternating, ``--repeats`` times after one warm-up of each. Prints the
median CPU ms per request with spread and the ratios; last line
``client_cpu_ratio=<engine / aiohttp-loop>`` (lower is better).

    python benchmarks/capture_client_cpu.py [--requests 3000] [--concurrency 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("engine", "sdk-loop", "aiohttp-loop")


def serve(port: int, completion_tokens: int) -> None:
    """The canned server (run as ``--serve PORT``)."""
    import asyncio
    import random

    from aiohttp import web

    answer = json.dumps(
        {
            "id": "chatcmpl-0",
            "object": "chat.completion",
            "created": 0,
            "model": "canned",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "token_ids": list(range(1000, 1000 + completion_tokens)),
                    "message": {"role": "assistant", "content": "", "reasoning": "word " * completion_tokens},
                }
            ],
            "prompt_token_ids": list(range(80)),
            "usage": {
                "prompt_tokens": 80,
                "completion_tokens": completion_tokens,
                "total_tokens": 80 + completion_tokens,
            },
        }
    ).encode()

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(random.uniform(0.02, 0.08))
        return web.Response(body=answer, content_type="application/json")

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "canned"}]})

    async def version(_request: web.Request) -> web.Response:
        return web.json_response({"version": "canned"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def prompts(n: int) -> list[tuple[str, list[dict]]]:
    return [
        (f"{i:016x}", [{"role": "user", "content": f"Question {i}: " + "explain this step by step. " * 8}])
        for i in range(n)
    ]


def cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_variant(name: str, base_url: str, n: int, concurrency: int, out: Path) -> float:
    """CPU seconds of this process for ``n`` requests (run as ``--variant NAME``)."""
    sys.path.insert(0, str(ROOT))
    if name == "engine":
        from eagle_assets.reasoning_samples.capture import capture
        from eagle_assets.reasoning_samples.engine import ClientSettings
        from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling

        requests = [PromptRequest(pid, messages, "train") for pid, messages in prompts(n)]
        started = cpu_seconds()
        report = capture(
            [base_url],
            requests,
            out,
            Sampling(temperature=0.6, top_p=0.95, max_tokens=256),
            ClientSettings(concurrency=concurrency),
            log=lambda _: None,
        )
        if report.progress.ok != n:
            raise SystemExit(f"{name}: {report.progress.ok} of {n} ok")
        return cpu_seconds() - started

    import asyncio

    import aiohttp

    def body(messages: list[dict]) -> dict:
        return {
            "model": "canned",
            "messages": messages,
            "max_tokens": 256,
            "temperature": 0.6,
            "top_p": 0.95,
            "return_token_ids": True,
        }

    def row(pid: str, answer: dict) -> str:
        prompt_ids, completion = answer["prompt_token_ids"], answer["choices"][0]["token_ids"]
        return (
            json.dumps(
                {
                    "id": pid,
                    "input_ids": prompt_ids + completion,
                    "loss_mask": [0] * len(prompt_ids) + [1] * len(completion),
                }
            )
            + "\n"
        )

    if name == "sdk-loop":
        import openai

        from eagle_assets.reasoning_samples.sdk_http import httpx

        async def sdk_loop() -> None:
            limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
            client = openai.AsyncOpenAI(
                base_url=base_url,
                api_key="EMPTY",
                max_retries=4,
                http_client=openai.DefaultAioHttpClient(limits=limits),
            )
            pending = iter(prompts(n))
            with open(out.with_suffix(".jsonl"), "w") as sink:

                async def worker() -> None:
                    for pid, messages in pending:
                        raw = await client.post("/chat/completions", body=body(messages), cast_to=httpx.Response)
                        sink.write(row(pid, json.loads(raw.content)))

                await asyncio.gather(*(worker() for _ in range(concurrency)))
            await client.close()

        started = cpu_seconds()
        asyncio.run(sdk_loop())
        return cpu_seconds() - started

    async def loop() -> None:
        queue: asyncio.Queue = asyncio.Queue()
        for item in prompts(n):
            queue.put_nowait(item)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            with open(out.with_suffix(".jsonl"), "w") as sink:

                async def worker() -> None:
                    while not queue.empty():
                        pid, messages = queue.get_nowait()
                        async with session.post(f"{base_url}/chat/completions", json=body(messages)) as response:
                            sink.write(row(pid, await response.json()))

                await asyncio.gather(*(worker() for _ in range(concurrency)))

    started = cpu_seconds()
    asyncio.run(loop())
    return cpu_seconds() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--completion-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.completion_tokens)
    if args.variant:
        print(
            json.dumps({"cpu_s": run_variant(args.variant, args.base_url, args.requests, args.concurrency, args.out)})
        )
        return

    import tempfile
    import urllib.request

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--completion-tokens", str(args.completion_tokens)]
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base_url}/models", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        ms: dict[str, list[float]] = {name: [] for name in VARIANTS}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(-1, args.repeats):  # -1: the warm-up of each
                order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
                for name in order:
                    run = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--variant",
                            name,
                            "--base-url",
                            base_url,
                            "--out",
                            str(Path(tmp) / f"{name}-{i}"),
                            "--requests",
                            str(args.requests),
                            "--concurrency",
                            str(args.concurrency),
                        ],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    per_request = 1000 * json.loads(run.stdout.splitlines()[-1])["cpu_s"] / args.requests
                    if i >= 0:
                        ms[name].append(per_request)
                        print(f"repeat {i + 1} {name:12s}: {per_request:.3f} ms CPU per request", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(
        f"requests={args.requests} concurrency={args.concurrency} completion_tokens={args.completion_tokens} "
        f"repeats={args.repeats} order=alternating server=canned (20-80 ms per answer, another process)"
    )
    median = {name: statistics.median(values) for name, values in ms.items()}
    for name, values in ms.items():
        spread = (max(values) - min(values)) / median[name]
        print(
            f"{name}: median {median[name]:.3f} ms CPU per request (runs {' '.join(f'{v:.3f}' for v in values)}; "
            f"spread {spread:.1%})"
        )
    print(f"engine_vs_sdk_ratio={median['engine'] / median['sdk-loop']:.3f}")
    print(f"client_cpu_ratio={median['engine'] / median['aiohttp-loop']:.3f}")


if __name__ == "__main__":
    main()
