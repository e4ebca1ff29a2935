"""Hidden-state extraction throughput: the ``transformers`` backend vs a naive loop, same job.

    python benchmarks/hidden_states_gpu.py            # one GPU: Llama-3.1-8B shape, 2048-token rows
    python benchmarks/hidden_states_gpu.py --tiny     # CPU smoke run of the same code, tiny shape

The verifier is built from the Llama-3.1-8B config with random bf16 weights (nothing downloaded);
the captured layers are EAGLE-3's defaults [2, 16, 29] plus the pre-norm final state. Both paths
write every sample the way the ``hidden_states`` asset does (safetensors, sha256, fsync, atomic
rename; files are deleted right after so the disk does not fill). Printed: tokens/s, model FLOP
utilisation against a bf16 matmul peak measured in this job, the forward-only ceiling, and the
ratio against the naive per-sample ``output_hidden_states=True`` loop.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
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
            "eagle_assets.plugins", ROOT / "plugins" / "__init__.py",
            submodule_search_locations=[str(ROOT / "plugins")])
        module = importlib.util.module_from_spec(spec)
        sys.modules["eagle_assets.plugins"] = module
        spec.loader.exec_module(module)


_import_project()

from eagle_assets.hidden_state_files import SampleWriter, content_id, relative_path  # noqa: E402
from eagle_assets.plugins.transformers_backend import HiddenStateExtractor  # noqa: E402

LLAMA_31_8B = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    tie_word_embeddings=False,
)
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype, n: int, iters: int) -> float:
    """Measured FLOP/s of one square matmul, the denominator of the utilisation."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    return 2 * n**3 * iters / (time.perf_counter() - start)


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


def flops_per_token(model, config, seq_len: int) -> float:
    """2 x non-embedding parameters + causal attention (QK^T and AV over seq/2 keys on average)."""
    params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    attn = 2 * seq_len * config.num_attention_heads * config.head_dim * config.num_hidden_layers
    return 2 * params + attn


class DeletingWriter(SampleWriter):
    """The asset's sink (checks, safetensors, sha256, fsync, atomic rename), then the file is deleted
    so a long run does not fill the disk; the write cost is what is measured."""

    def __call__(self, sample) -> None:
        super().__call__(sample)
        (self.folder / relative_path(sample.key[1])).unlink()


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


def forward_only(model, sequences, batch, device) -> float:
    with torch.inference_mode():
        ids = torch.tensor([s for _, s in sequences[:batch]], device=device)
        model(input_ids=ids, use_cache=False)
        sync(device)
        start = time.perf_counter()
        reps = 3
        for _ in range(reps):
            model(input_ids=ids, use_cache=False)
        sync(device)
    return reps * ids.numel() / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="CPU-sized model and rows (smoke test).")
    parser.add_argument("--samples", type=int, default=None, help="rows for the optimized path")
    parser.add_argument("--naive-samples", type=int, default=None, help="rows for the naive loop")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--out", default=None, help="write-and-delete folder (default: a temp dir)")
    args = parser.parse_args()

    from transformers import LlamaConfig

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shape = TINY if args.tiny else LLAMA_31_8B
    seq_len = args.seq_len or (256 if args.tiny else 2048)
    samples = args.samples or (24 if args.tiny else 256)
    naive_samples = args.naive_samples or (8 if args.tiny else 32)
    batch_tokens = args.batch_tokens or (2048 if args.tiny else 16384)

    peak = matmul_peak(device, dtype, 1024 if args.tiny else 8192, 5 if args.tiny else 50)
    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(0)
    started = time.perf_counter()
    model = random_model(config, device, dtype)
    sync(device)
    build_s = time.perf_counter() - started
    n = config.num_hidden_layers
    layer_ids = [2, n // 2, n - 3, n]
    rng = random.Random(0)
    sequences = [(i, [rng.randrange(config.vocab_size) for _ in range(seq_len)]) for i in range(samples + 8)]
    warmup, timed = keyed(sequences[:8], layer_ids), keyed(sequences[8:], layer_ids)
    fpt = flops_per_token(model, config, seq_len)
    fwd = forward_only(model, timed, max(1, batch_tokens // seq_len), device)

    folder = Path(args.out or tempfile.mkdtemp(prefix="hs-bench-"))
    extractor = HiddenStateExtractor(model, n, config.hidden_size, layer_ids, batch_tokens=batch_tokens)
    extractor.run(warmup, DeletingWriter(folder, len(layer_ids), config.hidden_size))  # allocator, kernels
    sink = DeletingWriter(folder, len(layer_ids), config.hidden_size)  # counts the timed rows only
    sync(device)
    start = time.perf_counter()
    extractor.run(timed, sink)
    sync(device)
    fast_s = time.perf_counter() - start
    fast_tps = samples * seq_len / fast_s

    naive_sink = DeletingWriter(folder, len(layer_ids), config.hidden_size)
    naive_loop(model, warmup[:1], layer_ids, naive_sink, device)
    start = time.perf_counter()
    naive_loop(model, timed[:naive_samples], layer_ids, naive_sink, device)
    sync(device)
    naive_tps = naive_samples * seq_len / (time.perf_counter() - start)

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    result = {
        "device": name, "dtype": str(dtype), "shape": "tiny" if args.tiny else "Llama-3.1-8B",
        "seq_len": seq_len, "batch_tokens": batch_tokens, "layer_ids": layer_ids,
        "samples": samples, "naive_samples": naive_samples, "model_build_s": round(build_s, 1),
        "peak_tflops": round(peak / 1e12, 3), "gflop_per_token": round(fpt / 1e9, 4),
        "forward_only_tok_s": round(fwd), "forward_only_mfu": round(fwd * fpt / peak, 3),
        "extract_tok_s": round(fast_tps), "extract_mfu": round(fast_tps * fpt / peak, 3),
        "naive_tok_s": round(naive_tps), "naive_mfu": round(naive_tps * fpt / peak, 3),
        "speedup_vs_naive": round(fast_tps / naive_tps, 2),
    }
    written = sum(w.bytes for w in sink.written.values())
    result["written_gb_per_s"] = round(written / fast_s / 1e9, 3)
    result["bytes_per_token"] = written // (samples * seq_len)
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"hidden_states_gpu_{batch_tokens}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
