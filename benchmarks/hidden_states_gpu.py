"""Hidden-state extraction throughput: the ``transformers`` backend vs a naive loop, same job.

    python benchmarks/hidden_states_gpu.py            # one GPU: Llama-3.1-8B shape, rows of 512-2048 tokens
    python benchmarks/hidden_states_gpu.py --tiny     # CPU smoke run of the same code, tiny shape
    python benchmarks/hidden_states_gpu.py --dtype fp8   # + the extractor writing fp8 files, same job

The verifier is built from the Llama-3.1-8B config with random bf16 weights (nothing downloaded);
the captured layers are EAGLE-3's defaults [2, 16, 29] plus the pre-norm final state. Rows have mixed
random lengths (``--lengths``), so the extractor's length bucketing and padding are exercised. Both paths
write every sample the way the ``hidden_states`` asset does (safetensors, sha256, fsync, atomic rename;
files are deleted right after so the disk does not fill). The paths alternate, ``--repeats`` times.

Before timing, both paths extract the same mixed-length rows and their tensors are compared (the naive
loop's last state is transformers' post-norm one, so the extractor's pre-norm final state is passed through
the model's final norm first); the script exits 1 if they differ beyond bf16 tolerance.
Printed: tokens/s of both (median and spread over repeats), model FLOP utilisation against a bf16 matmul
peak measured in this job and against the GPU's dense bf16 datasheet figure, and the ratio against the
naive per-sample ``output_hidden_states=True`` loop.

The ceiling is the model's forward pass over the *same rows*, bucketed and padded as the extractor does,
with nothing captured or written (``forward``), timed in every repeat beside the extractor, and so is the
extractor with a sink that keeps nothing (``capture``: hooks and device-to-host copies, no hashing or
writes). ``extract_vs_forward_ratio`` = median extractor tok/s / median forward tok/s;
``capture_vs_forward_ratio`` splits the gap between the capture and copies and the writes.

``--dtype fp8`` adds a third path to every repeat: the same extractor storing hs-connectors' FP8 format
(quantized on the device, half the bytes copied and written). Its dequantized tensors are compared with the
bf16 path's (worst per-token cosine), and ``fp8_vs_bf16_extract_ratio`` = median fp8 tok/s / median bf16
tok/s is printed with both rates and bytes per token, and ``fp8_extract_vs_forward_ratio`` = median fp8 tok/s /
median forward tok/s.

Every extractor run also reports how long its forward loop waited for a free host buffer (``host_wait_s``:
writes holding the GPU back). ``--alt-host-buffers N`` adds the bf16 extractor with N host buffers
instead of ``--host-buffers`` to every repeat, and ``--alt-buffered-writes`` one whose sink writes every byte
through the page cache (no ``O_DIRECT``; both options: one alt path with both): ``alt_vs_extract_ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


sys.path.insert(0, str(ROOT))
from benchmarks.checkout import import_project  # noqa: E402

import_project()

from benchmarks.draft_shapes import verifier_config  # noqa: E402
from benchmarks.extraction_paths import (  # noqa: E402
    DeletingWriter,
    NullSink,
    compare_paths,
    forward_same_rows,
    fp8_agreement,
    keyed,
    naive_loop,
    random_model,
)
from benchmarks.extraction_result import datasheet_peak, print_result, result_fields, row_flops  # noqa: E402
from benchmarks.peak import matmul_peak  # noqa: E402
from eagle_assets.core.layout import BF16  # noqa: E402
from eagle_assets.plugins.transformers_extraction import HOST_BUFFERS, HiddenStateExtractor  # noqa: E402


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(run, device) -> float:
    sync(device)
    start = time.perf_counter()
    run()
    sync(device)
    return time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="CPU-sized model and rows (smoke test).")
    parser.add_argument("--samples", type=int, default=None, help="rows for the optimized path, per repeat")
    parser.add_argument("--naive-samples", type=int, default=None, help="rows for the naive loop, per repeat")
    parser.add_argument(
        "--lengths",
        type=int,
        nargs=2,
        default=None,
        metavar=("MIN", "MAX"),
        help="row lengths, uniform at random in [MIN, MAX]",
    )
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--host-buffers", type=int, default=HOST_BUFFERS, help="pinned host buffers per extractor")
    parser.add_argument("--alt-host-buffers", type=int, default=None, help="also time bf16 with this many")
    parser.add_argument(
        "--alt-buffered-writes", action="store_true", help="also time bf16 writing through the page cache"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of both paths")
    parser.add_argument("--out", default=None, help="write-and-delete folder (default: a temp dir)")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "fp8"],
        default="bfloat16",
        help="fp8: also time the extractor writing fp8 files (hs-connectors' format), same job",
    )
    return parser.parse_args()


@dataclass
class Job:
    """One invocation's sizes, device and random-weight model, shared by every timed path."""

    args: argparse.Namespace
    device: str
    dtype: torch.dtype
    name: str
    low: int
    high: int
    samples: int
    naive_samples: int
    batch_tokens: int
    peak: float
    datasheet: float | None
    config: object
    model: object
    build_s: float
    layer_ids: list[int]
    folder: Path

    def writer(self, feature_dtype: str = BF16, direct: bool = True) -> DeletingWriter:
        return DeletingWriter(self.folder, len(self.layer_ids), self.config.hidden_size, feature_dtype, direct)

    def extractor(self, **kwargs) -> HiddenStateExtractor:
        n, hidden = self.config.num_hidden_layers, self.config.hidden_size
        kwargs.setdefault("host_buffers", self.args.host_buffers)
        return HiddenStateExtractor(self.model, n, hidden, self.layer_ids, batch_tokens=self.batch_tokens, **kwargs)


def setup(args) -> Job:
    """The sizes ``args`` resolve to, the measured matmul peak, and the model built from the preset."""
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = matmul_peak(device, dtype, 1024 if args.tiny else 8192, 5 if args.tiny else 50)
    config = verifier_config("tiny" if args.tiny else "llama-3.1-8b")
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    started = time.perf_counter()
    model = random_model(config, device, dtype)
    sync(device)
    build_s = time.perf_counter() - started
    n = config.num_hidden_layers
    low, high = args.lengths or ((64, 256) if args.tiny else (512, 2048))
    return Job(
        args=args,
        device=device,
        dtype=dtype,
        name=name,
        low=low,
        high=high,
        samples=args.samples or (24 if args.tiny else 256),
        naive_samples=args.naive_samples or (8 if args.tiny else 32),
        batch_tokens=args.batch_tokens or (2048 if args.tiny else 16384),
        peak=peak,
        datasheet=datasheet_peak(name) if device == "cuda" else None,
        config=config,
        model=model,
        build_s=build_s,
        layer_ids=[2, n // 2, n - 3, n],
        folder=Path(args.out or tempfile.mkdtemp(prefix="hs-bench-")),
    )


def time_repeat(job: Job, extractors: dict, timed_rows, repeat: int, rates: dict[str, list]) -> None:
    """Every path once over ``timed_rows`` (the naive loop over the first ``naive_samples``), added to ``rates``;
    ``extractors``: bf16, and fp8 / alt (other host buffers) where asked for."""
    model, device = job.model, job.device
    extractor, fp8_extractor = extractors["bf16"], extractors.get("fp8")
    tokens = sum(len(ids) for _, ids in timed_rows)
    flops = sum(row_flops(model, job.config, len(ids)) for _, ids in timed_rows)

    def alt_run():
        sink = job.writer(direct=not job.args.alt_buffered_writes)
        seconds = timed(lambda: extractors["alt"].run(timed_rows, sink), device)
        rates["alt"].append(tokens / seconds)
        rates["alt_host_wait_s"].append(extractors["alt"].host_wait_s)

    def bf16_run():
        sink = job.writer()
        seconds = timed(lambda: extractor.run(timed_rows, sink), device)
        written = sum(w.bytes for w in sink.written.values())
        rates["extract"].append(tokens / seconds)
        rates["host_wait_s"].append(extractor.host_wait_s)
        rates["drain_s"].append(extractor.drain_s)
        rates["extract_mfu"].append(flops / seconds)
        rates["written"].append(written / seconds)
        rates["bytes_per_token"].append(written / tokens)

    def fp8_run():
        sink = job.writer("fp8")
        seconds = timed(lambda: fp8_extractor.run(timed_rows, sink), device)
        rates["fp8"].append(tokens / seconds)
        rates["fp8_drain_s"].append(fp8_extractor.drain_s)
        rates["fp8_bytes_per_token"].append(sum(w.bytes for w in sink.written.values()) / tokens)
        print(f"repeat {repeat + 1}: extract fp8 {rates['fp8'][-1]:.0f} tok/s", flush=True)

    def forward_run():
        seconds = timed(lambda: forward_same_rows(model, timed_rows, job.batch_tokens, device), device)
        rates["forward"].append(tokens / seconds)
        rates["forward_mfu"].append(flops / seconds)

    def capture_run():
        seconds = timed(lambda: extractor.run(timed_rows, NullSink()), device)
        rates["capture"].append(tokens / seconds)

    # The paths take turns going first (rotating order), so none always meets a cold or a warm machine.
    order = [forward_run, bf16_run, capture_run] + ([fp8_run] if fp8_extractor is not None else [])
    order += [alt_run] if "alt" in extractors else []
    for run in order[repeat % len(order) :] + order[: repeat % len(order)]:
        run()
    print(
        f"repeat {repeat + 1}: forward on the same rows {rates['forward'][-1]:.0f} tok/s, capture without "
        f"writes {rates['capture'][-1]:.0f} tok/s",
        flush=True,
    )
    naive_rows = timed_rows[: job.naive_samples]
    naive_sink = job.writer()
    naive_s = timed(lambda: naive_loop(model, naive_rows, job.layer_ids, naive_sink, device), device)
    rates["naive"].append(sum(len(ids) for _, ids in naive_rows) / naive_s)
    rates["naive_mfu"].append(sum(row_flops(model, job.config, len(ids)) for _, ids in naive_rows) / naive_s)
    print(
        f"repeat {repeat + 1}: extract {rates['extract'][-1]:.0f} tok/s (waited {rates['host_wait_s'][-1]:.2f}s for "
        f"host buffers), naive {rates['naive'][-1]:.0f} tok/s",
        flush=True,
    )


def main() -> None:
    job = setup(parse_args())
    args, layer_ids, rng = job.args, job.layer_ids, random.Random(0)

    def rows(count, offset):
        return keyed(
            [
                (offset + i, [rng.randrange(job.config.vocab_size) for _ in range(rng.randint(job.low, job.high))])
                for i in range(count)
            ],
            layer_ids,
        )

    warmup, check = rows(8, 0), rows(8, 8)
    timed_sets = [rows(job.samples, 1000 * (r + 1)) for r in range(args.repeats)]
    extractor = job.extractor()
    extractors = {"bf16": extractor}
    if args.alt_host_buffers:
        extractors["alt"] = job.extractor(host_buffers=args.alt_host_buffers)
        extractors["alt"].run(warmup, job.writer())
    elif args.alt_buffered_writes:
        extractors["alt"] = extractor  # only the sink differs: the same extractor, its buffers and kernels
    extractor.run(warmup, job.writer())  # allocator, kernels
    naive_loop(job.model, warmup[:1], layer_ids, job.writer(), job.device)
    equivalence = compare_paths(job.model, extractor, check, layer_ids, job.device)
    print(f"equivalence: {equivalence}", flush=True)
    fp8_extractor = fp8_cosine = None
    if args.dtype == "fp8":
        fp8_extractor = extractors["fp8"] = job.extractor(feature_dtype="fp8")
        fp8_extractor.run(warmup, job.writer("fp8"))
        fp8_cosine = fp8_agreement(extractor, fp8_extractor, check)
        print(f"fp8 min_token_cosine vs bf16: {fp8_cosine:.5f}", flush=True)

    rates: dict[str, list] = defaultdict(list)
    for repeat, timed_rows in enumerate(timed_sets):
        time_repeat(job, extractors, timed_rows, repeat, rates)
    result = result_fields(job, equivalence, rates, fp8_cosine)
    print_result(result, job, bool(rates["fp8"]))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"hidden_states_gpu_{job.batch_tokens}_{args.dtype}.json").write_text(
            json.dumps(result, indent=2)
        )
    if not equivalence["tensors_match"]:
        sys.exit("the extractor's tensors differ from the naive loop's beyond bf16 tolerance")


if __name__ == "__main__":
    main()
