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
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _import_project() -> None:
    """Run from a plain checkout too (the GPU host has no `pip install -e .`): map ``plugins/`` to
    ``eagle_assets.plugins`` the way pyproject's package-dir does."""
    sys.path.insert(0, str(ROOT))
    if importlib.util.find_spec("eagle_assets.plugins") is None:
        spec = importlib.util.spec_from_file_location(
            "eagle_assets.plugins", ROOT / "plugins" / "__init__.py", submodule_search_locations=[str(ROOT / "plugins")]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["eagle_assets.plugins"] = module
        spec.loader.exec_module(module)


_import_project()

from benchmarks.draft_shapes import verifier_config  # noqa: E402
from benchmarks.peak import matmul_peak  # noqa: E402
from eagle_assets.hidden_states.files import SampleWriter, content_id, dequantized, relative_path  # noqa: E402
from eagle_assets.plugins.transformers_extraction import HiddenStateExtractor, bucket_batches  # noqa: E402


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def random_model(config, device: str, dtype):
    """A ``LlamaModel`` with random weights, built on ``device`` in ``dtype``."""
    from transformers import LlamaModel

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the final dtype: an fp32 8B model would take 32 GB first
    try:
        with torch.device(device):
            return LlamaModel(config).eval()
    finally:
        torch.set_default_dtype(default_dtype)


# Dense (no sparsity) bf16 tensor-core FLOP/s from NVIDIA's datasheets, by device name.
DATASHEET_BF16_DENSE = {"H200": 989.4e12, "H100": 989.4e12}


def datasheet_peak(name: str) -> float | None:
    return next((flops for key, flops in DATASHEET_BF16_DENSE.items() if key in name), None)


def row_flops(model, config, length: int) -> float:
    """Forward FLOPs of one row: 2 x non-embedding parameters per token + causal attention (QK^T and AV,
    each over ``length``/2 keys on average per query)."""
    params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    attn = 2 * length * length * config.num_attention_heads * config.head_dim * config.num_hidden_layers
    return 2 * params * length + attn


class DeletingWriter(SampleWriter):
    """The asset's sink (checks, safetensors, sha256, fsync, atomic rename), then the file is deleted
    so a long run does not fill the disk; the write cost is what is measured."""

    def __call__(self, sample) -> None:
        super().__call__(sample)
        (self.folder / relative_path(sample.key[1])).unlink()


class CollectingSink:
    """Keeps each sample's tensors (on the host) for the equivalence check."""

    def __init__(self):
        self.samples: dict = {}
        self._lock = threading.Lock()

    def __call__(self, sample) -> None:
        tensors = {"hidden_states": sample.hidden_states.cpu()}
        if sample.scales is not None:  # fp8 from the extractor: compared after hs-connectors' dequantization
            tensors["hidden_states_scales"] = sample.scales.cpu()
        with self._lock:
            self.samples[sample.key] = dequantized(tensors)["hidden_states"].float()


def fp8_agreement(bf16_extractor, fp8_extractor, sequences) -> float:
    """Worst per-token cosine similarity between the fp8 path's dequantized states and the bf16 path's."""
    bf16, fp8 = CollectingSink(), CollectingSink()
    bf16_extractor.run(sequences, bf16)
    fp8_extractor.run(sequences, fp8)
    return min(
        torch.nn.functional.cosine_similarity(fp8.samples[k], bf16.samples[k], dim=-1).min().item()
        for k, _ in sequences
    )


def compare_paths(model, extractor, sequences, layer_ids, device) -> dict:
    """Worst per-token cosine similarity and worst relative max error between the extractor's states
    (batched, padded) and the naive loop's (one row at a time), over every row, token and layer."""
    fast, naive = CollectingSink(), CollectingSink()
    extractor.run(sequences, fast)
    naive_loop(model, sequences, layer_ids, naive, device)
    norm = model.norm
    worst_cos, worst_rel = 1.0, 0.0
    for key, _ids in sequences:
        ours, ref = fast.samples[key].clone(), naive.samples[key]
        with torch.inference_mode():  # the naive loop's final state is post-norm: compare like with like
            final = norm(ours[:, -1].to(device=device, dtype=next(model.parameters()).dtype))
        ours[:, -1] = final.float().cpu()
        cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
        worst_cos = min(worst_cos, cos.min().item())
        worst_rel = max(worst_rel, ((ours - ref).abs().amax() / ref.abs().amax()).item())
    return {
        "rows": len(sequences),
        "min_token_cosine": round(worst_cos, 5),
        "max_rel_error": round(worst_rel, 4),
        "tensors_match": worst_cos >= 0.999 and worst_rel <= 0.05,
    }


def keyed(sequences, layer_ids):
    return [((i, content_id(ids, "benchmark", layer_ids)), ids) for i, ids in sequences]


def naive_loop(model, sequences, layer_ids, sink, device) -> None:
    """What people write first: every layer kept, the wanted ones stacked, a blocking copy."""
    from eagle_assets.backends import SampleTensors

    with torch.inference_mode():
        for key, ids in sequences:
            out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True, use_cache=False)
            states = torch.stack([out.hidden_states[k][0] for k in layer_ids], dim=1).to(torch.bfloat16).cpu()
            sink(SampleTensors(key, states, torch.tensor(ids, dtype=torch.int64)))


def forward_same_rows(model, sequences, batch_tokens: int, device: str) -> None:
    """The baseline: the model's forward over the extractor's own batches (the same length buckets,
    the same padding, ids copied the same way), with nothing captured, copied back or written."""
    lengths = [len(ids) for _, ids in sequences]
    with torch.inference_mode():
        for batch in bucket_batches(lengths, batch_tokens):
            ids = torch.zeros((len(batch), lengths[batch[0]]), dtype=torch.long)
            for b, i in enumerate(batch):
                ids[b, : lengths[i]] = torch.tensor(sequences[i][1])
            ids = ids.pin_memory().to(device, non_blocking=True) if device == "cuda" else ids
            model(input_ids=ids, use_cache=False)


class NullSink:
    """Takes every sample and keeps nothing: the extractor's capture and device-to-host copies alone."""

    def __call__(self, sample) -> None:
        pass


def spread(values) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def timed(run, device) -> float:
    sync(device)
    start = time.perf_counter()
    run()
    sync(device)
    return time.perf_counter() - start


def main() -> None:
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
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of both paths")
    parser.add_argument("--out", default=None, help="write-and-delete folder (default: a temp dir)")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "fp8"],
        default="bfloat16",
        help="fp8: also time the extractor writing fp8 files (hs-connectors' format), same job",
    )
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    low, high = args.lengths or ((64, 256) if args.tiny else (512, 2048))
    samples = args.samples or (24 if args.tiny else 256)
    naive_samples = args.naive_samples or (8 if args.tiny else 32)
    batch_tokens = args.batch_tokens or (2048 if args.tiny else 16384)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"

    peak = matmul_peak(device, dtype, 1024 if args.tiny else 8192, 5 if args.tiny else 50)
    datasheet = datasheet_peak(name) if device == "cuda" else None
    config = verifier_config("tiny" if args.tiny else "llama-3.1-8b")
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    started = time.perf_counter()
    model = random_model(config, device, dtype)
    sync(device)
    build_s = time.perf_counter() - started
    n = config.num_hidden_layers
    layer_ids = [2, n // 2, n - 3, n]
    rng = random.Random(0)

    def rows(count, offset):
        return keyed(
            [
                (offset + i, [rng.randrange(config.vocab_size) for _ in range(rng.randint(low, high))])
                for i in range(count)
            ],
            layer_ids,
        )

    warmup, check = rows(8, 0), rows(8, 8)
    timed_sets = [rows(samples, 1000 * (r + 1)) for r in range(args.repeats)]
    folder = Path(args.out or tempfile.mkdtemp(prefix="hs-bench-"))
    extractor = HiddenStateExtractor(model, n, config.hidden_size, layer_ids, batch_tokens=batch_tokens)
    extractor.run(warmup, DeletingWriter(folder, len(layer_ids), config.hidden_size))  # allocator, kernels
    naive_loop(model, warmup[:1], layer_ids, DeletingWriter(folder, len(layer_ids), config.hidden_size), device)
    equivalence = compare_paths(model, extractor, check, layer_ids, device)
    print(f"equivalence: {equivalence}", flush=True)
    fp8_extractor = None
    if args.dtype == "fp8":
        fp8_extractor = HiddenStateExtractor(
            model, n, config.hidden_size, layer_ids, batch_tokens=batch_tokens, feature_dtype="fp8"
        )
        fp8_extractor.run(warmup, DeletingWriter(folder, len(layer_ids), config.hidden_size, "fp8"))
        fp8_cosine = fp8_agreement(extractor, fp8_extractor, check)
        print(f"fp8 min_token_cosine vs bf16: {fp8_cosine:.5f}", flush=True)
    fp8_rates, fp8_bytes_per_token = [], []

    fast_rates, naive_rates, fast_mfu, naive_mfu, written_rates, bytes_per_token = [], [], [], [], [], []
    forward_rates, forward_mfu, capture_rates = [], [], []
    for repeat, timed_rows in enumerate(timed_sets):
        tokens = sum(len(ids) for _, ids in timed_rows)
        flops = sum(row_flops(model, config, len(ids)) for _, ids in timed_rows)

        def bf16_run():
            sink = DeletingWriter(folder, len(layer_ids), config.hidden_size)
            seconds = timed(lambda: extractor.run(timed_rows, sink), device)
            fast_rates.append(tokens / seconds)
            fast_mfu.append(flops / seconds)
            written = sum(w.bytes for w in sink.written.values())
            written_rates.append(written / seconds)
            bytes_per_token.append(written / tokens)

        def fp8_run():
            fp8_sink = DeletingWriter(folder, len(layer_ids), config.hidden_size, "fp8")
            fp8_seconds = timed(lambda: fp8_extractor.run(timed_rows, fp8_sink), device)
            fp8_rates.append(tokens / fp8_seconds)
            fp8_bytes_per_token.append(sum(w.bytes for w in fp8_sink.written.values()) / tokens)
            print(f"repeat {repeat + 1}: extract fp8 {fp8_rates[-1]:.0f} tok/s", flush=True)

        def forward_run():
            seconds = timed(lambda: forward_same_rows(model, timed_rows, batch_tokens, device), device)
            forward_rates.append(tokens / seconds)
            forward_mfu.append(flops / seconds)

        def capture_run():
            seconds = timed(lambda: extractor.run(timed_rows, NullSink()), device)
            capture_rates.append(tokens / seconds)

        # The paths take turns going first (rotating order), so none always meets a cold or a warm machine.
        order = [forward_run, bf16_run, capture_run] + ([fp8_run] if fp8_extractor is not None else [])
        for run in order[repeat % len(order) :] + order[: repeat % len(order)]:
            run()
        print(
            f"repeat {repeat + 1}: forward on the same rows {forward_rates[-1]:.0f} tok/s, capture without "
            f"writes {capture_rates[-1]:.0f} tok/s",
            flush=True,
        )
        naive_rows = timed_rows[:naive_samples]
        naive_sink = DeletingWriter(folder, len(layer_ids), config.hidden_size)
        naive_s = timed(lambda: naive_loop(model, naive_rows, layer_ids, naive_sink, device), device)
        naive_rates.append(sum(len(ids) for _, ids in naive_rows) / naive_s)
        naive_mfu.append(sum(row_flops(model, config, len(ids)) for _, ids in naive_rows) / naive_s)
        print(f"repeat {repeat + 1}: extract {fast_rates[-1]:.0f} tok/s, naive {naive_rates[-1]:.0f} tok/s", flush=True)

    med = statistics.median
    result = {
        "device": name,
        "dtype": str(dtype),
        "shape": "tiny" if args.tiny else "Llama-3.1-8B",
        "row_lengths": [low, high],
        "batch_tokens": batch_tokens,
        "layer_ids": layer_ids,
        "samples_per_repeat": samples,
        "naive_samples_per_repeat": naive_samples,
        "repeats": args.repeats,
        "model_build_s": round(build_s, 1),
        "measured_peak_tflops": round(peak / 1e12, 1),
        "datasheet_peak_tflops": round(datasheet / 1e12, 1) if datasheet else None,
        **equivalence,
        "forward_same_rows_tok_s": round(med(forward_rates)),
        "forward_same_rows_runs_tok_s": [round(r) for r in forward_rates],
        "forward_same_rows_mfu_measured": round(med(forward_mfu) / peak, 3),
        "capture_no_writes_tok_s": round(med(capture_rates)),
        "capture_no_writes_runs_tok_s": [round(r) for r in capture_rates],
        "capture_vs_forward_ratio": round(med(capture_rates) / med(forward_rates), 3),
        "extract_vs_forward_ratio": round(med(fast_rates) / med(forward_rates), 3),
        "extract_vs_forward_per_repeat": [round(e / f, 3) for e, f in zip(fast_rates, forward_rates)],
        "extract_tok_s": round(med(fast_rates)),
        "extract_tok_s_spread": round(spread(fast_rates), 3),
        "extract_runs_tok_s": [round(r) for r in fast_rates],
        "extract_mfu_measured": round(med(fast_mfu) / peak, 3),
        "naive_tok_s": round(med(naive_rates)),
        "naive_tok_s_spread": round(spread(naive_rates), 3),
        "naive_mfu_measured": round(med(naive_mfu) / peak, 3),
        "speedup_vs_naive": round(med(fast_rates) / med(naive_rates), 2),
        "written_gb_per_s": round(med(written_rates) / 1e9, 3),
        "bytes_per_token": round(med(bytes_per_token)),
    }
    if fp8_rates:
        result.update(
            {
                "fp8_min_token_cosine": round(fp8_cosine, 5),
                "extract_fp8_tok_s": round(med(fp8_rates)),
                "extract_fp8_tok_s_spread": round(spread(fp8_rates), 3),
                "extract_fp8_runs_tok_s": [round(r) for r in fp8_rates],
                "fp8_bytes_per_token": round(med(fp8_bytes_per_token)),
                "fp8_vs_bf16_bytes_ratio": round(med(fp8_bytes_per_token) / med(bytes_per_token), 4),
                "fp8_vs_bf16_extract_ratio": round(med(fp8_rates) / med(fast_rates), 3),
                "fp8_extract_vs_forward_ratio": round(med(fp8_rates) / med(forward_rates), 3),
            }
        )
    if datasheet:
        result["extract_mfu_datasheet"] = round(med(fast_mfu) / datasheet, 3)
        result["naive_mfu_datasheet"] = round(med(naive_mfu) / datasheet, 3)
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    print(
        f"result shape={result['shape']} rows={low}-{high} batch_tokens={batch_tokens} "
        f"extract_vs_forward_ratio={result['extract_vs_forward_ratio']} "
        f"capture_vs_forward_ratio={result['capture_vs_forward_ratio']} extract_tok_s={result['extract_tok_s']} "
        f"forward_same_rows_tok_s={result['forward_same_rows_tok_s']}"
        + (f" fp8_extract_vs_forward_ratio={result['fp8_extract_vs_forward_ratio']}" if fp8_rates else ""),
        flush=True,
    )
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"hidden_states_gpu_{batch_tokens}_{args.dtype}.json").write_text(
            json.dumps(result, indent=2)
        )
    if not equivalence["tensors_match"]:
        sys.exit("the extractor's tensors differ from the naive loop's beyond bf16 tolerance")


if __name__ == "__main__":
    main()
