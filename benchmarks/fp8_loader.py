"""What a training loader worker spends on one packed batch: bf16 features, fp8 dequantized in the worker
(speculators' ``fp8`` backend), and fp8 kept as fp8 for the GPU to dequantize (this project's training).

    python benchmarks/fp8_loader.py                  # 8B shape (hidden 4096, 3 aux + final layer), 8K rows
    python benchmarks/fp8_loader.py --hidden 7168    # Kimi-K2.5's hidden size

Random features are written in the ``hidden_states`` asset's layout (bf16 and fp8 copies of the same
rows), laid out as a speculators training folder, and read back exactly as speculators' DataLoader worker
does: ``dataset[i]`` for each sample of a packed batch (speculators' own multipack sampler), then the
collate (EAGLE-3's shift included). Variants:

- ``bf16``: speculators' ``ArrowDataset`` + ``CollateFn`` over the ``file`` backend;
- ``fp8-speculators``: the same over hs-connectors' ``fp8`` backend (each sample dequantized on the CPU);
- ``fp8-ours``: :class:`~eagle_assets.eagle3_checkpoint.trainer_process.device_batches.Fp8OnDeviceDataset` +
  ``ScalesKeptCollate`` over the same ``fp8`` backend (values stay fp8; scales ride along).

One thread (a worker's setting: ``torch.set_num_threads(1)``), files in the page cache (each variant
reads every batch once untimed first). Variants alternate batch by batch, ``--repeats`` passes over
``--batches`` batches; printed per variant: median CPU ms per batch with spread, bytes per batch that the
pinned copy and the host-to-device transfer then move, and the ratios
``fp8_loader_ms_ratio`` = fp8-ours / fp8-speculators and fp8-ours / bf16. The GPU side (dequantizing a
batch on the device) is not timed here: ``benchmarks/train_gpu.py --fp8-features`` measures whole training.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/eagle_fp8_loader_bench"))
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--seq-len", type=int, nargs=2, default=(1536, 2048), metavar=("MIN", "MAX"))
    parser.add_argument("--total-seq-len", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import shutil

    import torch
    from hs_connectors import HiddenStatesBackend
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2
    from transformers import LlamaConfig

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import Fp8OnDeviceDataset, ScalesKeptCollate
    from eagle_assets.eagle3_checkpoint.training_data import build_training_data
    from eagle_assets.hidden_states.files import TRAINER_BACKENDS
    from tests.helpers.synthetic import write_head_only_verifier, write_random_features

    torch.set_num_threads(1)
    shutil.rmtree(args.work, ignore_errors=True)
    layer_ids = [2, 16, 29, 32]
    verifier = write_head_only_verifier(
        args.work / "verifier",
        LlamaConfig(
            vocab_size=4096,
            hidden_size=args.hidden,
            intermediate_size=256,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            eos_token_id=1,
        ),
    )
    folders = {}
    for dtype in ("bfloat16", "fp8"):
        write_random_features(
            args.work / dtype,
            "bench",
            verifier_path=verifier,
            layer_ids=layer_ids,
            hidden_size=args.hidden,
            vocab_size=4096,
            num_rows=args.rows,
            seq_len=tuple(args.seq_len),
            feature_dtype=dtype,
        )
        folders[dtype] = build_training_data(args.work / dtype, ["bench"], args.work / "work")

    def loader_parts(dtype: str, dataset_class, collate_class):
        data = folders[dtype]
        transfer = HiddenStatesBackend.registry[TRAINER_BACKENDS[dtype]].from_train_args(
            argparse.Namespace(hidden_states_path=None), str(data.path)
        )
        dataset = dataset_class(
            max_len=args.total_seq_len, datapath=str(data.path), transfer=transfer, on_missing="raise"
        )
        collate = collate_class(
            args.total_seq_len,
            args.hidden,
            num_target_layers=3,
            dtype=dataset.hidden_states_dtype,
            preprocess=shift_batch,
        )
        return dataset, collate

    variants = {
        "bf16": loader_parts("bfloat16", ArrowDataset, CollateFn),
        "fp8-speculators": loader_parts("fp8", ArrowDataset, CollateFn),
        "fp8-ours": loader_parts("fp8", Fp8OnDeviceDataset, ScalesKeptCollate),
    }
    lengths = variants["bf16"][0].approx_lengths
    sampler = MultipackDistributedBatchSamplerV2(
        batch_max_length=args.total_seq_len, lengths=lengths, num_replicas=1, rank=0, seed=0
    )
    batches = list(sampler)[: args.batches]
    if len(batches) < args.batches:
        parser.error(f"--rows {args.rows} packs into only {len(batches)} batches; give more rows")

    def build(name: str, indices) -> dict:
        dataset, collate = variants[name]
        return collate([dataset[i] for i in indices])

    sizes = {}
    for name in variants:  # untimed pass: page cache, first-use allocations
        for indices in batches:
            batch = build(name, indices)
        sizes[name] = sum(v.numel() * v.element_size() for v in batch.values() if isinstance(v, torch.Tensor))
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for repeat in range(args.repeats):
        for number, indices in enumerate(batches):
            shift = (repeat + number) % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.process_time()
                build(name, indices)
                times[name].append((time.process_time() - started) * 1000)

    print(
        f"shape: hidden {args.hidden}, aux layers {layer_ids[:-1]} + final, rows {args.seq_len[0]}-{args.seq_len[1]} "
        f"tokens packed to {args.total_seq_len}; {args.batches} batches x {args.repeats} passes, variants alternating; "
        f"one thread; torch {torch.__version__}"
    )
    medians = {}
    for name in names:
        medians[name] = statistics.median(times[name])
        spread = (max(times[name]) - min(times[name])) / medians[name]
        print(
            f"{name}: {medians[name]:.0f} ms CPU per batch (spread {spread:.0%}), {sizes[name] / 1e6:.0f} MB per "
            f"batch to pin and copy to the GPU"
        )
    print(f"fp8_loader_ms_ratio={medians['fp8-ours'] / medians['fp8-speculators']:.3f} (fp8-ours / fp8-speculators)")
    print(f"fp8_vs_bf16_loader_ms_ratio={medians['fp8-ours'] / medians['bf16']:.3f} (fp8-ours / bf16)")
    print(f"fp8_batch_bytes_ratio={sizes['fp8-ours'] / sizes['bf16']:.3f} (fp8-ours / bf16)")


if __name__ == "__main__":
    main()
