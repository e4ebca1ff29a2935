"""Scaling over the GPUs of one host: tokens/s of extraction and of draft training on 1 and N devices.

    python benchmarks/scaling_gpu.py                       # 1 vs every visible GPU, Llama-3.1-8B shapes
    python benchmarks/scaling_gpu.py --gpus 2 --only extract
    python benchmarks/scaling_gpu.py --tiny                # CPU smoke run: 1 vs 2 CPU processes, tiny shapes

Extraction runs the ``hidden_states`` asset's own path, :func:`eagle_assets.hidden_states.parallel.extract_on_devices`
with the ``transformers`` backend: in-process on one device, else one worker process per device, each
loading a random-weight verifier of ``benchmarks/hidden_states_gpu.py``'s shape from disk. Both runs get
the same rows (fixed length, ``--rows-per-gpu`` x N) and write every file for real (safetensors, sha256,
fsync, rename) through that benchmark's ``DeletingWriter`` (``benchmarks/extraction_paths.py``), which
removes each file once written so the disk does not fill. Throughput = the sum over devices of each
device's tokens/s from its first written sample to its last (model loading excluded; its cost shows in
the end-to-end rate, printed too).

Training runs ``benchmarks/train_gpu.py``'s setup (head-only verifier, random bf16 features, 1-layer
EAGLE-3 draft, draft vocab 32000, 8192-token packed rows) through :func:`eagle_assets.eagle3_checkpoint.trainer.train`
with ``num_processes`` 1 and N (``torchrun``, DDP; NCCL with NVLink multicast off). Throughput = tokens
speculators' sampler packs into epochs 2..E over all ranks / wall time of those epochs on rank 0.

Printed per step: tok/s on 1 and N devices, speedup and scaling efficiency (= speedup / N).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

# NVLink multicast stays off in every process this starts (workers, torchrun ranks).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
# Both import the project from a plain checkout too; spawned extraction workers re-run these imports
# (this file is their main module) before they unpickle their job.
import hidden_states_gpu as extraction_bench
import torch
import train_gpu as training_bench
from draft_shapes import verifier_config

from eagle_assets.backends import ExtractionRequest
from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.vocab import build_draft_vocab
from eagle_assets.hidden_states.parallel import extract_on_devices
from eagle_assets.plugins.transformers_backend import TRANSFORMERS_BACKEND
from tests.helpers.synthetic import write_head_only_verifier, write_random_features


def devices_for(count: int, tiny: bool) -> list[str]:
    return ["cpu"] * count if tiny else [f"cuda:{i}" for i in range(count)]


def save_random_verifier(folder: Path, config, device: str, dtype) -> Path:
    """A random-weight verifier folder that the backend (and every worker) loads like a real one."""
    model = extraction_bench.random_model(config, device, dtype)
    model.save_pretrained(folder)
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return folder


def extraction_rate(
    model_path: Path, sequences, layer_ids, hidden_size: int, devices: list[str], batch_tokens: int, folder: Path
) -> dict:
    """One extraction of ``sequences`` on ``devices``. The rate is the sum over devices of each one's
    own rate from its first written sample to its last (its model load excluded, whenever it ended)."""
    shutil.rmtree(folder, ignore_errors=True)
    total = sum(len(ids) for _, ids in sequences)
    marks: dict[int, list[tuple[float, int]]] = {}
    writer = extraction_bench.DeletingWriter(folder, len(layer_ids), hidden_size)  # workers use its class too
    request = ExtractionRequest(sequences=sequences, layer_ids=layer_ids, batch_tokens=batch_tokens)
    started = time.perf_counter()
    extract_on_devices(
        TRANSFORMERS_BACKEND,
        model_path,
        request,
        devices,
        writer,
        worker_progress=lambda rank, _, tokens: marks.setdefault(rank, []).append((time.perf_counter(), tokens)),
    )
    ended = time.perf_counter()
    rates = [(m[-1][1] - m[0][1]) / (m[-1][0] - m[0][0]) for m in marks.values()]
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the in-process run's cached blocks would crowd worker 0's GPU
    return {
        "tok_s": sum(rates),
        "end_to_end_tok_s": total / (ended - started),
        "startup_s": max(m[0][0] for m in marks.values()) - started,
        "written_gb_per_s": writer.bytes / (ended - started) / 1e9,
    }


def training_rate(
    n: int, data, vocab, verifier: Path, work: Path, epochs: int, draft_vocab: int, total_seq_len: int
) -> float:
    settings = TrainingSettings(
        epochs=epochs,
        draft_vocab_size=draft_vocab,
        total_seq_len=total_seq_len,
        lr=1e-3,
        early_stop_patience=0,
        num_processes=n,
    )
    log = training_bench.StampedLog(f"train x{n}")
    trainer.train(data, vocab, str(verifier), settings, work, log)
    tokens = sum(
        training_bench.tokens_per_epoch(data.path, data.train_data_ratio, total_seq_len, settings.seed, e, replicas=n)
        for e in range(1, epochs)
    )
    return tokens / log.epoch_seconds(epochs)


def report(step: str, n: int, one: float, many: float) -> dict:
    speedup = many / one
    line = {
        f"{step}_tok_s_1": round(one),
        f"{step}_tok_s_{n}": round(many),
        f"{step}_speedup": round(speedup, 3),
        f"{step}_scaling_efficiency": round(speedup / n, 3),
    }
    for key, value in line.items():
        print(f"{key}={value}", flush=True)
    return line


def run_extraction(args, n: int, work: Path) -> dict:
    import numpy as np

    device, dtype = ("cpu", torch.float32) if args.tiny else ("cuda", torch.bfloat16)
    config = verifier_config("tiny" if args.tiny else "llama-3.1-8b")
    seq_len = args.seq_len or (128 if args.tiny else 2048)
    batch_tokens = 1024 if args.tiny else 16384
    layers = config.num_hidden_layers
    layer_ids = [2, layers // 2, layers - 3, layers]
    torch.manual_seed(0)
    model_path = save_random_verifier(work / "verifier", config, device, dtype)
    rows = np.random.default_rng(0).integers(0, config.vocab_size, size=(args.rows_per_gpu * n, seq_len))
    sequences = extraction_bench.keyed(list(enumerate(rows)), layer_ids)
    print(
        f"extraction: {len(sequences)} rows x {seq_len} tokens, layers {layer_ids}, verifier {model_path}", flush=True
    )
    results = {}
    for count in (1, n):
        results[count] = extraction_rate(
            model_path,
            sequences,
            layer_ids,
            config.hidden_size,
            devices_for(count, args.tiny),
            batch_tokens,
            work / "hidden_states",
        )
        print(
            f"extraction on {count} device(s): " + json.dumps({k: round(v, 2) for k, v in results[count].items()}),
            flush=True,
        )
    shutil.rmtree(model_path)
    return report("extract", n, results[1]["tok_s"], results[n]["tok_s"])


def run_training(args, n: int, work: Path) -> dict:
    layer_ids = [2, 4, 6, 8] if args.tiny else [2, 16, 29, 32]
    draft_vocab, total_seq_len = (64, 512) if args.tiny else (32000, 8192)
    seq_len = (64, 256) if args.tiny else (1536, 2048)
    device = "cpu" if args.tiny else "cuda"
    verifier, storage = work / "head-verifier", work / "storage"
    config = verifier_config("tiny" if args.tiny else "llama-3.1-8b")
    write_head_only_verifier(verifier, config, device=device)
    write_random_features(
        storage,
        "bench",
        verifier_path=verifier,
        layer_ids=layer_ids,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        num_rows=args.train_rows_per_gpu * n,
        seq_len=seq_len,
        device=device,
    )
    log = training_bench.StampedLog("data")
    data = build_training_data(storage, ["bench"], work / "train", log=log)
    vocab = build_draft_vocab(data.path, draft_vocab, config.vocab_size, log=log)
    print(
        f"training: {data.num_rows} rows, {data.num_tokens} tokens, {args.epochs} epochs (2..{args.epochs} timed)",
        flush=True,
    )
    rates = {
        count: training_rate(count, data, vocab, verifier, work / "train", args.epochs, draft_vocab, total_seq_len)
        for count in (1, n)
    }
    return report("train", n, rates[1], rates[n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run at tiny shapes (1 vs 2 processes)")
    parser.add_argument("--gpus", type=int, default=None, help="N (default: every visible GPU; 2 with --tiny)")
    parser.add_argument("--only", choices=["extract", "train"], default=None, help="one step only")
    parser.add_argument("--work", type=Path, default=Path("/tmp/eagle_scaling_bench"))
    parser.add_argument("--rows-per-gpu", type=int, default=None, help="extraction rows per device (x N for both runs)")
    parser.add_argument("--seq-len", type=int, default=None, help="extraction row length")
    parser.add_argument("--train-rows-per-gpu", type=int, default=None, help="training rows per device (x N)")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs; 2..E are timed")
    args = parser.parse_args()
    args.rows_per_gpu = args.rows_per_gpu or (32 if args.tiny else 256)
    args.train_rows_per_gpu = args.train_rows_per_gpu or (24 if args.tiny else 96)
    args.epochs = args.epochs or (3 if args.tiny else 5)
    n = args.gpus or (2 if args.tiny else torch.cuda.device_count())
    if not args.tiny and (n < 2 or n > torch.cuda.device_count()):
        raise SystemExit(f"need 2..{torch.cuda.device_count()} visible GPUs for --gpus {n} (use --tiny on CPU)")
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    name = "cpu" if args.tiny else torch.cuda.get_device_name()
    print(
        f"device={name} n={n} shape={'tiny' if args.tiny else 'llama-3.1-8b'} "
        f"NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}",
        flush=True,
    )
    result = {"device": name, "n": n, "tiny": args.tiny}
    if args.only in (None, "extract"):
        result |= run_extraction(args, n, args.work / "extract")
    if args.only in (None, "train"):
        result |= run_training(args, n, args.work / "train")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"scaling_gpu_{n}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
