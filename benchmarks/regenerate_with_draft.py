"""Regeneration with a draft against regeneration without it: speed, and that the samples are the same.

Two managed vLLM servers of the same verifier are started side by side: one plain, one speculating with
``--draft`` (a kept eagle3_checkpoint folder of that verifier) at K = ``--k``, as ``reasoning_samples`` starts it
with ``draft_checkpoint`` set (``VLLMServer.speculating``). The same greedy
requests (demo prompts) go through :func:`eagle_assets.reasoning_samples.capture.capture`, exactly what the asset
runs, to each server in turn, alternating which goes first, ``--repeats`` times after one warm-up of each.
Throughput is output tokens per second of wall time; τ comes from the speculating server's counters.
Every run's token ids are compared with the plain server's first run (greedy: they must be identical).

On CPU with the embedded tiny verifier the draft costs about as much as the verifier per step, so a slow-down is
expected (``eagle_assets.capacity.speculative.expected_speedup(tau, k, 1.0)``): this measures the overhead
and correctness, not the GPU speed-up.

    python benchmarks/regenerate_with_draft.py --draft STORAGE/eagle3_checkpoint/<hash> [--prompts 64]

Last line: ``draft_speedup_ratio=<with draft / without>`` (median tok/s; > 1 is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from eagle_assets.capacity.speculative import expected_speedup
from eagle_assets.eagle3_eval.metrics import fetch_counters
from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.collection import collect
from eagle_assets.reasoning_samples.capture import capture
from eagle_assets.reasoning_samples.draft import check_draft_verifier, read_draft
from eagle_assets.reasoning_samples.engine import ClientSettings
from eagle_assets.reasoning_samples.recipe import SERVED_FOLDER, ServedVerifier
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.resources import VLLMServer
from eagle_assets.tiny_verifier.cache import cached_tiny_verifier


class PrintLog:
    """The server resource's log outside Dagster (server log lines dropped)."""

    def info(self, message: str) -> None:
        if not message.startswith("[vllm]"):
            print(message, flush=True)

    warning = info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", required=True, help="A kept eagle3_checkpoint folder of the verifier.")
    parser.add_argument("--verifier", default="", help="Verifier folder; default: the embedded tiny-qwen3.")
    parser.add_argument("--k", type=int, default=3, help="num_speculative_tokens.")
    parser.add_argument("--port", type=int, default=8310, help="The plain server's port; the draft's is the next.")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    verifier = Path(args.verifier) if args.verifier else cached_tiny_verifier()
    draft = read_draft(args.draft, args.k, field="--draft")
    served = ServedVerifier.of_folder(verifier, model=str(verifier), fingerprinted=SERVED_FOLDER, reasoning_parser="")
    check_draft_verifier(draft, served, field="--draft")
    prompts = collect(dataset_source("demo"), limit=args.prompts, seed=0).prompts
    requests = [PromptRequest(p.prompt_id, p.messages, p.split) for p in prompts]
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=args.max_tokens)
    settings = ClientSettings(concurrency=args.concurrency, request_timeout_s=600)
    plain = VLLMServer(
        model=str(verifier), port=args.port, max_model_len=4096, env={"VLLM_CPU_KVCACHE_SPACE": "1"}, stop_grace_s=10
    )
    # What speculating_server(plain, draft) gives reasoning_samples, on a port of its own.
    drafted = plain.speculating(draft.path, draft.num_speculative_tokens, port=args.port + 1)

    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        urls = {"plain": stack.enter_context(plain.serve(log=PrintLog())), "draft": None}
        urls["draft"] = stack.enter_context(drafted.serve(log=PrintLog()))
        runs = 0

        def run(name: str) -> tuple[float, list]:
            nonlocal runs
            runs += 1
            folder = Path(tmp) / f"{name}-{runs}"
            started = time.perf_counter()
            report = capture(urls[name], requests, folder, sampling, settings, log=lambda _: None)
            wall = time.perf_counter() - started
            assert report.progress.errors == 0, f"{report.progress.errors} errors in a {name} run"
            rows = load_samples(folder).select(["prompt_id", "token_ids"]).to_pylist()
            return report.progress.completion_tokens / wall, rows

        _, reference = run("plain")  # warm-up of each; the plain one's tokens are the reference
        run("draft")
        before = fetch_counters(urls["draft"])
        rates: dict[str, list[float]] = {"plain": [], "draft": []}
        same = {"plain": 0, "draft": 0}
        for i in range(args.repeats):
            for name in ("plain", "draft") if i % 2 == 0 else ("draft", "plain"):
                rate, rows = run(name)
                rates[name].append(rate)
                same[name] += rows == reference
                print(f"repeat {i} {name:5s}: {rate:8.0f} output tok/s, tokens as the reference: {rows == reference}")
        counters = fetch_counters(urls["draft"]) - before

    tau = counters.acceptance_length
    print(
        f"verifier={verifier} draft={draft.path} k={args.k} prompts={len(requests)} concurrency={args.concurrency} "
        f"max_tokens={args.max_tokens} greedy repeats={args.repeats}"
    )
    for name in ("plain", "draft"):
        print(
            f"{name:5s} median {statistics.median(rates[name]):8.0f} tok/s (min {min(rates[name]):.0f}, max "
            f"{max(rates[name]):.0f}); runs with the reference's tokens {same[name]}/{args.repeats}"
        )
    paired = [d / p for d, p in zip(rates["draft"], rates["plain"])]
    print(f"tau {tau:.3f} over {int(counters.drafts)} drafts; paired ratios {[round(r, 3) for r in paired]}")
    print(f"cost model, a draft as dear as the verifier (draft_cost_ratio 1): {expected_speedup(tau, args.k, 1.0):.3f}")
    print(f"draft_speedup_ratio={statistics.median(rates['draft']) / statistics.median(rates['plain']):.3f}")


if __name__ == "__main__":
    main()
