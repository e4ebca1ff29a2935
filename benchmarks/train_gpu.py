"""Draft-training throughput: this project's training path vs the ``speculators train`` CLI, same data, same job.

    python benchmarks/train_gpu.py            # one GPU: 8B-shaped verifier (Llama-3.1-8B config)
    python benchmarks/train_gpu.py --tiny     # CPU smoke run of our path at a tiny shape (stock
                                              # speculators cannot train on CPU: no baseline there)

The verifier folder holds only ``config.json`` and a ``model.safetensors`` with random
``model.embed_tokens.weight``, ``lm_head.weight`` and ``model.norm.weight`` (all speculators reads);
random bf16 hidden states for aux layers [2, 16, 29] + the final layer are written in the storage layout
of the ``hidden_states`` asset. Both runs train a 1-layer EAGLE-3 draft (draft vocab 32000, ttt 3,
8192-token packed rows, eager loss, Muon) on the same training folder:

- ours: :func:`eagle_assets.training.runner.train` -- the ``eagle3_checkpoint`` asset's path: speculators'
  trainer with one loader worker per spare CPU core (15 on a 16-core H200 host) whose large buffers stay
  mapped between batches (:mod:`eagle_assets.training.loader_workers`), metrics recorded every 10 steps;
- baseline: ``python -m speculators train`` with the same model/data flags and its own defaults
  otherwise (12 loader workers, vocab maps regenerated from the same ``token_freq.pt``, metrics logged
  every step). It is stopped once its last epoch completes: its last validation and save are not timed.

Throughput = trained tokens (the sampler's packed batches, after EAGLE-3's one-token shift) / wall
time of epochs 2..N, timed from each process's "Training epoch k/N started|completed" lines (epoch 1
holds torch.compile's warm-up and the loader workers' start; validation and checkpoint saves fall
outside the window). Both processes end an epoch's window only once its GPU work is done: speculators
synchronises at every step (``--log-freq 1``, its default), ours at every 10th step and at the epoch's
end. The same epochs of the same data are timed for both, so both count the same tokens.

Sizes: the default 600 rows of 1536-2048 tokens (~1M training tokens) make each timed epoch last
about 20 s on an H200 (shorter epochs are dominated by the ~1 s the loader needs to start an epoch).
Only ``--distinct-rows`` of them are different tensor files (the rest repeat them under their own
prompt ids), so writing the data costs seconds, not 30 GB; everything is flushed to disk before
training and read from the page cache by both runs alike.
Printed: per-epoch tokens/s of both (and their spread), both totals and
``train_throughput_ratio=<ours/speculators>``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The GPU host runs a plain checkout, without `pip install -e .`: the training process needs it too.
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from eagle_assets.training import runner  # noqa: E402
from eagle_assets.training.data_dir import build_training_data  # noqa: E402
from eagle_assets.training.settings import TrainingSettings  # noqa: E402
from eagle_assets.training.synthetic import write_head_only_verifier, write_random_features  # noqa: E402
from eagle_assets.training.vocab import build_draft_vocab  # noqa: E402

LLAMA_31_8B = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
)
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
            tie_word_embeddings=False, eos_token_id=1)
EPOCH_LINE = re.compile(r"Training epoch (\d+)/(\d+) (started|completed)")


class StampedLog:
    """Prints a training process's lines (``quiet``: only epoch lines) and remembers when epochs started and ended."""

    def __init__(self, name: str, quiet: bool = False):
        self.name = name
        self.quiet = quiet
        self.marks: dict[tuple[int, str], float] = {}

    def info(self, line: str) -> None:
        now = time.perf_counter()
        match = EPOCH_LINE.search(line)
        if match:
            self.marks[(int(match.group(1)), match.group(3))] = now
        if match or not self.quiet:
            print(f"[{self.name}] {line}", flush=True)

    warning = info

    def epoch_durations(self, epochs: int) -> list[float]:
        """Seconds of each timed epoch (2..``epochs``)."""
        return [self.marks[(k, "completed")] - self.marks[(k, "started")] for k in range(2, epochs + 1)]

    def epoch_seconds(self, epochs: int) -> float:
        return sum(self.epoch_durations(epochs))


def tokens_per_epoch(data_path: Path, train_ratio: float, total_seq_len: int, seed: int, epoch: int,
                     replicas: int = 1) -> int:
    """Tokens the trainer sees in one epoch, over all ``replicas`` data-parallel ranks: speculators'
    own sampler over the train split."""
    import datasets
    import numpy as np
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    lengths = np.asarray(datasets.load_from_disk(str(data_path)).with_format(None)["seq_len"])
    lengths = lengths[: int(len(lengths) * train_ratio)]
    total = 0
    for rank in range(replicas):
        sampler = MultipackDistributedBatchSamplerV2(batch_max_length=total_seq_len, lengths=lengths,
                                                     num_replicas=replicas, rank=rank, seed=seed)
        sampler.set_epoch(epoch)
        # Each packed sample loses one token to EAGLE-3's shift; a batch holds at most total_seq_len.
        total += int(sum(min(total_seq_len, int((lengths[batch] - 1).sum())) for batch in sampler))
    return total


def epoch_report(name: str, log: StampedLog, epoch_tokens: list[int], epochs: int) -> float:
    """Print per-epoch tokens/s of one run and their spread; return the run's overall tokens/s."""
    seconds = log.epoch_durations(epochs)
    rates = [tokens / secs for tokens, secs in zip(epoch_tokens, seconds, strict=True)]
    overall = sum(epoch_tokens) / sum(seconds)
    spread = (max(rates) - min(rates)) / statistics.mean(rates)
    print(f"{name}: epoch seconds {' '.join(f'{s:.1f}' for s in seconds)}; tokens/s per epoch "
          f"{' '.join(f'{r:.0f}' for r in rates)}; spread (max-min)/mean {spread:.1%}", flush=True)
    print(f"{name}_tokens_per_s={overall:.0f}", flush=True)
    return overall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run at a tiny shape")
    parser.add_argument("--work", type=Path, default=Path("/tmp/eagle_train_bench"))
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--distinct-rows", type=int, default=64,
                        help="different tensor files among the rows (the rest repeat them)")
    parser.add_argument("--seq-len", type=int, nargs=2, default=(1536, 2048), metavar=("MIN", "MAX"))
    parser.add_argument("--epochs", type=int, default=3, help="epochs 2..N are timed (epoch 1 compiles)")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: epoch 1 (compilation) is never timed")

    import torch
    from transformers import LlamaConfig

    shape = TINY if args.tiny else LLAMA_31_8B
    layer_ids = [2, 4, 6, 8] if args.tiny else [2, 16, 29, 32]
    draft_vocab, total_seq_len = (64, 1024) if args.tiny else (32000, 8192)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shutil.rmtree(args.work, ignore_errors=True)
    verifier, storage, work = args.work / "verifier", args.work / "storage", args.work / "work"
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    started = time.perf_counter()
    write_head_only_verifier(verifier, LlamaConfig(**shape), device=device)
    write_random_features(storage, "bench", verifier_path=verifier, layer_ids=layer_ids,
                          hidden_size=shape["hidden_size"], vocab_size=shape["vocab_size"], num_rows=args.rows,
                          seq_len=tuple(args.seq_len), device=device, distinct_rows=args.distinct_rows)
    log = StampedLog("ours")
    data = build_training_data(storage, ["bench"], work, log=log)
    vocab = build_draft_vocab(data.path, draft_vocab, shape["vocab_size"], log=log)
    os.sync()  # no write-back of the fresh files while the first run is being timed
    print(f"data: {data.num_rows} rows, {data.num_tokens} tokens, written in {time.perf_counter() - started:.0f}s",
          flush=True)

    settings = TrainingSettings(epochs=args.epochs, draft_vocab_size=draft_vocab, total_seq_len=total_seq_len, lr=1e-3,
                                validation_fraction=0.1, early_stop_patience=0)
    runner.train(data, vocab, str(verifier), settings, work, log)

    epoch_tokens = [tokens_per_epoch(data.path, 0.9, total_seq_len, settings.seed, e) for e in range(1, args.epochs)]
    print(f"device={torch.cuda.get_device_name() if device == 'cuda' else 'cpu'} "
          f"shape={'tiny' if args.tiny else 'llama-3.1-8b'} epochs_timed={args.epochs - 1} "
          f"tokens_timed={sum(epoch_tokens)} (per epoch {' '.join(map(str, epoch_tokens))})")
    ours = epoch_report("ours", log, epoch_tokens, args.epochs)
    if out:
        (out / "train_gpu.txt").write_text(f"ours_tokens_per_s={ours:.0f}\n")
    if device == "cpu":
        return

    # speculators prints every step's metrics (~30 lines): only its epoch lines are echoed.
    baseline = StampedLog("speculators", quiet=True)
    save = work / "speculators-cli"
    command = [sys.executable, "-m", "speculators", "train",
               "--verifier-name-or-path", str(verifier), "--data-path", str(data.path),
               "--save-path", str(save / "checkpoints"), "--log-dir", str(save / "logs"),
               "--draft-vocab-size", str(draft_vocab), "--total-seq-len", str(total_seq_len),
               "--epochs", str(args.epochs), "--target-layer-ids", *map(str, layer_ids[:-1]),
               "--mask-token-id", str(shape["eos_token_id"]), "--loss-implementation", "eager",
               "--seed", str(settings.seed), "--train-data-ratio", "0.9"]
    save.mkdir(parents=True)
    # Stopped once its last epoch completes: its last validation and save are not timed.
    runner.run_streaming(command, baseline, cwd=save, done=lambda: (args.epochs, "completed") in baseline.marks)
    if (args.epochs, "completed") not in baseline.marks:
        sys.exit(f"speculators train exited before epoch {args.epochs}/{args.epochs} completed")

    theirs = epoch_report("speculators", baseline, epoch_tokens, args.epochs)
    print(f"train_throughput_ratio={ours / theirs:.3f}")
    if out:
        (out / "train_gpu.txt").write_text(
            f"ours_tokens_per_s={ours:.0f}\nspeculators_tokens_per_s={theirs:.0f}\n"
            f"train_throughput_ratio={ours / theirs:.3f}\n")


if __name__ == "__main__":
    main()
