"""Draft-training throughput: this project's training path vs the ``speculators train`` CLI, same data, same job.

    python benchmarks/train_gpu.py --shape llama-3.1-8b   # one GPU (also: --shape kimi-k2.5)
    python benchmarks/train_gpu.py --shape tiny-kimi      # CPU smoke run of our path at a tiny shape (stock
                                                          # speculators cannot train on CPU: no baseline there)

The verifier folder holds only ``config.json`` and a ``model.safetensors`` with random
``model.embed_tokens.weight``, ``lm_head.weight`` and ``model.norm.weight`` (all speculators reads);
random bf16 hidden states for aux layers [2, 16, 29] + the final layer are written in the storage layout
of the ``hidden_states`` asset. ``--shape`` picks the verifier (:mod:`benchmarks.draft_shapes`: Llama-3.1-8B,
Kimi-K2.5's text model, or a tiny stand-in of either), its captured layers, and the draft vocabulary and
packed row length the project's training defaults resolve to for it (32000 and 9216 for both large
presets). Every run trains a 1-layer EAGLE-3 draft (ttt 3, Muon, lr 1e-3, seed 0) on the same training
folder, and every run records its metrics every 10th step:

- ``ours``: the ``eagle3_checkpoint`` asset's command (:mod:`eagle_assets.eagle3_checkpoint.trainer`): speculators'
  trainer with one loader worker per spare CPU core (15 on a 16-core H200 host) whose large buffers stay
  mapped between batches (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.loader_workers`), \
batches copied to the GPU a step
  ahead (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.device_batches`), no per-step host syncs
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.host_syncs`) and speculators' fused loss, \
callable under torch.compile
  through :mod:`eagle_assets.eagle3_checkpoint.trainer_process.fused_loss`;
- ``speculators``: ``python -m speculators train`` with the same model/data flags, ``--log-freq 10`` (its
  own code says to keep log_freq > 1 for speed), ``--loss-implementation eager`` and its own defaults
  otherwise (12 loader workers). Its default loss, ``fused``, fails under torch.compile on torch 2.11:
  ``speculators-fused`` (the CLI with its default loss; a variant that may fail, run once with ``--once``)
  shows it in the same job;
- ``gpu-bound``: ``benchmarks/train_step_probe.py`` with ``ours``' flags: the trainer's own steps over
  8 batches kept on the GPU (no data loading), timed after compilation -- the ceiling ``ours`` is
  measured against (``gpu_bound_fraction`` = median(ours) / median(gpu-bound)); the probe also times the
  eager loss and, with ``--probe-args``, more (see its docstring);
- ``speculators-wN``: the same CLI given our worker count too (``--num-workers N``): our change *is*
  the loader (its worker count and memory reuse), so both baselines are shown;
- ``ours-fp8`` (with ``--fp8-features``): ``ours`` on the same rows stored as FP8 (hs-connectors' format,
  written by the ``hidden_states`` asset's writer from the same random bf16 states), read through speculators'
  ``fp8`` backend and kept FP8 until the training device dequantizes each batch
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.device_batches`); \
``fp8_train_throughput_ratio`` = median(ours-fp8) /
  median(ours). ``--shape tiny --fp8-features`` trains both once on CPU and prints the same ratio.

The variants run one after another in a rotating order (repeat 1: A B C, repeat 2: B C A, ...),
``--repeats`` times. Throughput = trained tokens (the sampler's packed batches, after EAGLE-3's one-token
shift) / wall time of epochs 2..N, timed from each process's "Training epoch k/N started|completed"
lines (epoch 1 holds torch.compile's warm-up and the loader workers' start; validation and checkpoint
saves fall outside the window). The *span* rate divides the same tokens by the time from epoch 2's start
to epoch N's end, so the saves and validations between timed epochs count too (``ours`` starts loading the
next epoch during them; the span rate shows that nothing was only moved out of the timed window;
``train_throughput_ratio_span``). Each process is stopped once its last epoch completes. Start-up (process
start to "epoch 1 started": imports, verifier head and data loads) is reported apart. Printed: every
setting of every side, each run's tokens/s, per variant the median and spread (max-min)/median, and
``train_throughput_ratio`` = median(ours) / median(speculators) (plus the same-workers ratio).

The last line, ``result shape=<preset> ...``, carries the headline figures: ``train_throughput_ratio_span``
(the span rates' ratio) before ``train_throughput_ratio`` (the timed epochs'), ``gpu_bound_fraction`` (and its
span twin), and ``mfu`` = ours' median rate x the draft's matmul FLOPs per token
(:func:`benchmarks.draft_shapes.train_flops_per_token`) / the bf16 matmul peak measured in the job.

Sizes: rows of ``--seq-len`` tokens (default 1536-2048); only ``--distinct-rows`` of them are different
tensor files (the rest repeat them under their own prompt ids), so writing the data costs seconds;
everything is flushed to disk before training and read from the page cache by every run alike.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The GPU host runs a plain checkout, without `pip install -e .`: the training process needs it too.
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from benchmarks.draft_shapes import PRESETS, layer_ids, resolved_sizes, train_flops_per_token  # noqa: E402
from benchmarks.draft_shapes import verifier_config as preset_config  # noqa: E402
from benchmarks.peak import matmul_peak  # noqa: E402
from eagle_assets.eagle3_checkpoint import trainer  # noqa: E402
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings  # noqa: E402
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import gpu_worker_count  # noqa: E402
from eagle_assets.eagle3_checkpoint.training_data import build_training_data  # noqa: E402
from eagle_assets.eagle3_checkpoint.vocab import build_draft_vocab  # noqa: E402
from tests.helpers.synthetic import write_head_only_verifier, write_random_features  # noqa: E402

EPOCH_LINE = re.compile(r"Training epoch (\d+)/(\d+) (started|completed)")


class StampedLog:
    """Prints a training process's lines (``quiet``: only epoch lines) and remembers when epochs started and ended."""

    def __init__(self, name: str, quiet: bool = False):
        self.name = name
        self.quiet = quiet
        self.created = time.perf_counter()
        self.marks: dict[tuple[int, str], float] = {}
        # Every line of every run, stamped with seconds since its process started, when $OUT is set:
        # the in-epoch rates (the trainer's own per-log-step tokens/s) beside the epoch totals.
        self.transcript = Path(os.environ["OUT"], "run_lines.txt") if os.environ.get("OUT") else None

    def info(self, line: str) -> None:
        now = time.perf_counter()
        if self.transcript:
            with self.transcript.open("a") as transcript:
                transcript.write(f"[{self.name} +{now - self.created:.2f}s] {line}\n")
        match = EPOCH_LINE.search(line)
        if match:
            self.marks[(int(match.group(1)), match.group(3))] = now
        if match or not self.quiet:
            print(f"[{self.name}] {line}", flush=True)

    warning = info

    def epoch_durations(self, epochs: int) -> list[float]:
        """Seconds of each timed epoch (2..``epochs``)."""
        return [self.marks[(k, "completed")] - self.marks[(k, "started")] for k in range(2, epochs + 1)]

    def span_seconds(self, epochs: int) -> float:
        """From epoch 2's start to epoch ``epochs``' end: the timed epochs and everything between them."""
        return self.marks[(epochs, "completed")] - self.marks[(2, "started")]

    def startup_seconds(self) -> float:
        """From the process's start to its first epoch: imports, verifier head, data."""
        return self.marks[(1, "started")] - self.created


def tokens_per_epoch(
    data_path: Path, train_ratio: float, total_seq_len: int, seed: int, epoch: int, replicas: int = 1
) -> int:
    """Tokens the trainer sees in one epoch, over all ``replicas`` data-parallel ranks: speculators'
    own sampler over the train split."""
    import datasets
    import numpy as np
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    lengths = np.asarray(datasets.load_from_disk(str(data_path)).with_format(None)["seq_len"])
    lengths = lengths[: int(len(lengths) * train_ratio)]
    total = 0
    for rank in range(replicas):
        sampler = MultipackDistributedBatchSamplerV2(
            batch_max_length=total_seq_len, lengths=lengths, num_replicas=replicas, rank=rank, seed=seed
        )
        sampler.set_epoch(epoch)
        # Each packed sample loses one token to EAGLE-3's shift; a batch holds at most total_seq_len.
        total += int(sum(min(total_seq_len, int((lengths[batch] - 1).sum())) for batch in sampler))
    return total


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def variant_commands(
    settings: TrainingSettings,
    data,
    vocab,
    verifier: Path,
    layer_ids: list[int],
    mask_token_id: int,
    workers: int,
    fp8=None,
    probe_args: tuple[str, ...] = (),
) -> dict[str, Callable[[Path], list[str]]]:
    """Each variant's command line for a fresh save folder (named by the repeat); ``fp8``: the
    (training data, vocab) of the fp8-stored copy of the rows, for ``ours-fp8``."""

    def ours(save: Path, data=data, vocab=vocab) -> list[str]:
        argv = trainer.speculators_flags(settings, data, vocab, str(verifier), save / "checkpoints", on_cpu=False)
        return trainer.launch_command(settings, save / "metrics.jsonl", argv)

    def gpu_bound(save: Path) -> list[str]:
        argv = trainer.speculators_flags(settings, data, vocab, str(verifier), save / "checkpoints", on_cpu=False)
        return [
            sys.executable,
            str(ROOT / "benchmarks" / "train_step_probe.py"),
            *probe_args,
            "--metrics-file",
            str(save / "metrics.jsonl"),
            "--",
            *argv,
        ]

    def cli(save: Path, extra: tuple[str, ...] = ()) -> list[str]:
        return [
            sys.executable,
            "-m",
            "speculators",
            "train",
            "--verifier-name-or-path",
            str(verifier),
            "--data-path",
            str(data.path),
            "--save-path",
            str(save / "checkpoints"),
            "--log-dir",
            str(save / "logs"),
            "--draft-vocab-size",
            str(vocab.size),
            "--total-seq-len",
            str(settings.total_seq_len),
            "--epochs",
            str(settings.epochs),
            "--target-layer-ids",
            *map(str, layer_ids[:-1]),
            "--mask-token-id",
            str(mask_token_id),
            "--seed",
            str(settings.seed),
            "--lr",
            str(settings.lr),
            "--train-data-ratio",
            str(data.train_data_ratio),
            "--log-freq",
            str(settings.log_every_steps),
            *extra,
        ]

    def eager_cli(save: Path, extra: tuple[str, ...] = ()) -> list[str]:
        return cli(save, ("--loss-implementation", "eager", *extra))

    commands = {
        "ours": ours,
        "speculators": eager_cli,
        "gpu-bound": gpu_bound,
        f"speculators-w{workers}": lambda save: eager_cli(save, ("--num-workers", str(workers))),
        "speculators-fused": cli,
    }
    if fp8 is not None:
        commands["ours-fp8"] = lambda save: ours(save, *fp8)
    return commands


def timed_run(name: str, command: list[str], save: Path, epochs: int) -> StampedLog:
    """One training process, stopped once its last epoch completes (its last validation/save are untimed);
    raises ``TrainingFailed`` if it ends before."""
    save.mkdir(parents=True)
    log = StampedLog(name, quiet=True)
    trainer.run_streaming(command, log, cwd=save, done=lambda: (epochs, "completed") in log.marks)
    if (epochs, "completed") not in log.marks:
        raise trainer.TrainingFailed(f"{name} exited before epoch {epochs}/{epochs} completed")
    return log


class ProbeLog(StampedLog):
    """The probe's lines (all printed), its resident-step rates and when it started probing."""

    RATE = re.compile(r"probe resident loss=(\w+) \(without host syncs\).*tokens_per_s=(\d+)")

    def __init__(self, name: str):
        super().__init__(name, quiet=False)
        self.rates: dict[str, float] = {}
        self.probing: float | None = None

    def info(self, line: str) -> None:
        super().info(line)
        if line.startswith("probe:") and self.probing is None:
            self.probing = time.perf_counter()
        match = self.RATE.search(line)
        if match:
            self.rates[match.group(1)] = float(match.group(2))


def probe_run(name: str, command: list[str], save: Path, loss: str) -> tuple[float, float, ProbeLog]:
    """The gpu-bound probe: (tokens/s of resident steps with ``loss``, start-up seconds, its log)."""
    save.mkdir(parents=True)
    log = ProbeLog(name)
    trainer.run_streaming(command, log, cwd=save)
    if loss not in log.rates:
        raise trainer.TrainingFailed(f"{name} printed no resident rate for the {loss} loss")
    return log.rates[loss], log.probing - log.created, log


def result_line(args, total_seq_len, draft_vocab, rates, span_rates, flops_per_token, peak) -> str:
    """The headline: span ratio first (nothing can hide between timed epochs), the timed-epoch ratio
    beside it, ours against the GPU-bound step rate, and ours' MFU over the measured peak."""
    med = statistics.median
    fields = [
        f"result shape={args.shape}",
        f"row_tokens={args.seq_len[0]}-{args.seq_len[1]}",
        f"total_seq_len={total_seq_len}",
        f"draft_vocab={draft_vocab}",
    ]
    ours, ours_span = rates.get("ours"), span_rates.get("ours")
    if ours and span_rates.get("speculators"):
        fields.append(f"train_throughput_ratio_span={med(ours_span) / med(span_rates['speculators']):.3f}")
    if ours and rates.get("speculators"):
        fields.append(f"train_throughput_ratio={med(ours) / med(rates['speculators']):.3f}")
    if ours and rates.get("gpu-bound"):
        fields.append(f"gpu_bound_fraction={med(ours) / med(rates['gpu-bound']):.3f}")
        fields.append(f"gpu_bound_fraction_span={med(ours_span) / med(rates['gpu-bound']):.3f}")
        fields.append(f"gpu_bound_mfu={med(rates['gpu-bound']) * flops_per_token / peak:.3f}")
    if ours:
        fields.append(f"mfu={med(ours) * flops_per_token / peak:.3f}")
        fields.append(f"mfu_span={med(ours_span) * flops_per_token / peak:.3f}")
    fields.append(f"peak_tflops={peak / 1e12:.1f}")
    return " ".join(fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--shape",
        choices=PRESETS,
        default="llama-3.1-8b",
        help="the verifier preset (benchmarks/draft_shapes.py); the tiny ones are CPU smoke runs",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/eagle_train_bench"))
    parser.add_argument("--rows", type=int, default=240)
    parser.add_argument(
        "--distinct-rows", type=int, default=64, help="different tensor files among the rows (the rest repeat them)"
    )
    parser.add_argument("--seq-len", type=int, nargs=2, default=(1536, 2048), metavar=("MIN", "MAX"))
    parser.add_argument("--epochs", type=int, default=2, help="epochs 2..N are timed (epoch 1 compiles)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant, in rotating order")
    parser.add_argument(
        "--variants", nargs="*", default=None, help="subset of: ours speculators speculators-wN ours-fp8 (default: all)"
    )
    parser.add_argument(
        "--fp8-features", action="store_true", help="also train on the same rows stored as fp8 (variant ours-fp8)"
    )
    parser.add_argument(
        "--once",
        nargs="*",
        default=["speculators-fused"],
        help="variants run in the first repeat only (default: speculators-fused, which is "
        "expected to fail on torch 2.11)",
    )
    parser.add_argument(
        "--probe-args",
        default="--losses fused eager",
        help="flags for benchmarks/train_step_probe.py (variant gpu-bound)",
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=None,
        help="start no run that would likely end past this many seconds (the last run's length "
        "as its estimate, or the shortest run's for a variant not run yet); the summary "
        "covers the runs done",
    )
    parser.add_argument(
        "--runs-file",
        type=Path,
        default=None,
        help="JSON lines of finished runs: runs already in it (same settings) are not run "
        "again, new ones are appended, and the summary covers them all; lets one "
        "benchmark span several device calls of limited length",
    )
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: epoch 1 (compilation) is never timed")

    import torch

    config = preset_config(args.shape)
    captured = layer_ids(args.shape)
    draft_vocab, total_seq_len = resolved_sizes(args.shape)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shutil.rmtree(args.work, ignore_errors=True)
    verifier, storage, work = args.work / "verifier", args.work / "storage", args.work / "work"
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    started = time.perf_counter()
    write_head_only_verifier(verifier, config, device=device)
    write_random_features(
        storage,
        "bench",
        verifier_path=verifier,
        layer_ids=captured,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        num_rows=args.rows,
        seq_len=tuple(args.seq_len),
        device=device,
        distinct_rows=args.distinct_rows,
    )
    setup_log = StampedLog("setup")
    data = build_training_data(storage, ["bench"], work, log=setup_log)
    vocab = build_draft_vocab(data.path, draft_vocab, config.vocab_size, log=setup_log)
    fp8 = None
    if args.fp8_features:  # the same seed: the same rows and bf16 states, stored quantized
        write_random_features(
            args.work / "storage-fp8",
            "bench",
            verifier_path=verifier,
            layer_ids=captured,
            hidden_size=config.hidden_size,
            vocab_size=config.vocab_size,
            num_rows=args.rows,
            seq_len=tuple(args.seq_len),
            device=device,
            distinct_rows=args.distinct_rows,
            feature_dtype="fp8",
        )
        fp8_data = build_training_data(args.work / "storage-fp8", ["bench"], work, log=setup_log)
        fp8 = (fp8_data, build_draft_vocab(fp8_data.path, draft_vocab, config.vocab_size, log=setup_log))
    os.sync()  # no write-back of the fresh files while the first run is being timed
    print(
        f"data: {data.num_rows} rows, {data.num_tokens} tokens, written in {time.perf_counter() - started:.0f}s",
        flush=True,
    )

    settings = TrainingSettings(
        epochs=args.epochs,
        draft_vocab_size=draft_vocab,
        total_seq_len=total_seq_len,
        lr=1e-3,
        early_stop_patience=0,
        log_every_steps=10,
    )
    if device == "cpu":  # no baseline on CPU: our path once (and on fp8 features), through the asset's entry point
        runs = {"ours": trainer.train(data, vocab, str(verifier), settings, work, StampedLog("ours"))}
        if fp8 is not None:
            runs["ours-fp8"] = trainer.train(*fp8, str(verifier), settings, work, StampedLog("ours-fp8"))
        for name, run in runs.items():
            print(
                f"{name}: {run.summary.get('tokens_per_s') or 0:.0f} tok/s (speculators' step records), "
                f"val loss {run.summary['val_loss']:.4f}",
                flush=True,
            )
        if fp8 is not None and runs["ours"].summary.get("tokens_per_s"):
            print(
                "fp8_train_throughput_ratio="
                f"{runs['ours-fp8'].summary['tokens_per_s'] / runs['ours'].summary['tokens_per_s']:.3f}"
            )
        return

    workers = gpu_worker_count(settings.num_processes)
    settings_loss = "fused" if settings.loss_implementation == "auto" else settings.loss_implementation
    probe_args = (*args.probe_args.split(), "--shape", args.shape)
    commands = variant_commands(
        settings, data, vocab, verifier, captured, config.eos_token_id, workers, fp8, probe_args
    )
    names = args.variants or list(commands)
    unknown = set(names) - set(commands)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {list(commands)}")
    epoch_tokens = [
        tokens_per_epoch(data.path, data.train_data_ratio, total_seq_len, settings.seed, e)
        for e in range(1, args.epochs)
    ]
    peak = matmul_peak()
    flops_per_token = train_flops_per_token(config, draft_vocab)
    print(
        f"device={torch.cuda.get_device_name()} shape={args.shape} aux+final={captured} rows={data.num_rows} "
        f"row_tokens={args.seq_len[0]}-{args.seq_len[1]} total_seq_len={total_seq_len} draft_vocab={draft_vocab} "
        f"epochs={args.epochs} (timed 2..{args.epochs}) tokens_timed_per_run={sum(epoch_tokens)} "
        f"repeats={args.repeats} order=rotating draft_matmul_flops_per_token={flops_per_token / 1e9:.2f}G "
        f"measured_bf16_peak_tflops={peak / 1e12:.1f}",
        flush=True,
    )
    for name in names:
        print(f"settings[{name}]: {' '.join(commands[name](work / 'SAVE'))}", flush=True)

    rates: dict[str, list[float]] = {name: [] for name in names}
    startups: dict[str, list[float]] = {name: [] for name in names}
    # The same tokens over the whole span from epoch 2's start to the last epoch's end, the checkpoint saves
    # and validations between epochs included: no work can hide between timed epochs.
    span_rates: dict[str, list[float]] = {name: [] for name in names}
    lines = []
    # Everything that makes runs comparable; a runs file written under other settings is refused.
    setup_key = dict(
        rows=data.num_rows,
        tokens=data.num_tokens,
        epochs=args.epochs,
        seq_len=list(args.seq_len),
        distinct_rows=args.distinct_rows,
        tokens_timed=sum(epoch_tokens),
        device=torch.cuda.get_device_name(),
        shape=args.shape,
    )
    finished: dict[tuple[int, str], dict] = {}
    if args.runs_file and args.runs_file.exists():
        for record in map(json.loads, args.runs_file.read_text().splitlines()):
            if record["setup"] != setup_key:
                sys.exit(
                    f"--runs-file {args.runs_file} holds runs of other settings ({record['setup']}); "
                    f"this run's are {setup_key}: give a new file"
                )
            finished[(record["repeat"], record["name"])] = record
    run_seconds: dict[str, float] = {}
    failures: list[str] = []
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            if repeat and name in args.once:
                continue
            if (repeat, name) in finished:
                record = finished[(repeat, name)]
                if record.get("failed"):
                    failures.append(record["line"] + " (from --runs-file)")
                    continue
                rates[name].append(record["tokens_per_s"])
                startups[name].append(record["startup_s"])
                if "span_tokens_per_s" in record:
                    span_rates[name].append(record["span_tokens_per_s"])
                lines.append(record["line"] + " (from --runs-file)")
                continue
            # A variant's next run is estimated by its last one; a variant not run yet by the shortest run so
            # far (the first run of a process compiles cold and is no estimate of the warm ones after it).
            estimate = run_seconds.get(name, min(run_seconds.values(), default=0.0))
            if args.time_budget_s and time.perf_counter() - started + estimate > args.time_budget_s:
                continue
            save = work / f"{name}-{repeat}"
            run_started = time.perf_counter()
            record = dict(setup=setup_key, repeat=repeat, name=name)
            try:
                if name == "gpu-bound":
                    rate, startup, probe_log = probe_run(name, commands[name](save), save, settings_loss)
                    line = (
                        f"run repeat={repeat + 1} {name}: whole run {time.perf_counter() - run_started:.0f}s, "
                        f"startup {startup:.1f}s, resident-step rates {probe_log.rates}, {rate:.0f} tok/s"
                    )
                else:
                    log = timed_run(name, commands[name](save), save, args.epochs)
                    rate, startup = sum(epoch_tokens) / sum(log.epoch_durations(args.epochs)), log.startup_seconds()
                    span_rate = sum(epoch_tokens) / log.span_seconds(args.epochs)
                    span_rates[name].append(span_rate)
                    record.update(span_tokens_per_s=span_rate)
                    line = (
                        f"run repeat={repeat + 1} {name}: whole run {time.perf_counter() - run_started:.0f}s, "
                        f"startup {startup:.1f}s, epoch 1 (compile) "
                        f"{log.marks[(1, 'completed')] - log.marks[(1, 'started')]:.1f}s, timed epochs "
                        f"{' '.join(f'{s:.2f}s' for s in log.epoch_durations(args.epochs))}, {rate:.0f} tok/s "
                        f"(span {log.span_seconds(args.epochs):.2f}s: {span_rate:.0f} tok/s)"
                    )
                rates[name].append(rate)
                startups[name].append(startup)
                lines.append(line)
                record.update(tokens_per_s=rate, startup_s=startup, line=line)
            except trainer.TrainingFailed as failure:
                line = f"run repeat={repeat + 1} {name}: FAILED: {str(failure)[-1500:]}"
                failures.append(line)
                record.update(failed=True, line=line)
            print(line, flush=True)
            run_seconds[name] = time.perf_counter() - run_started
            if args.runs_file:
                with args.runs_file.open("a") as runs_file:
                    runs_file.write(json.dumps(record) + "\n")
            shutil.rmtree(save, ignore_errors=True)  # checkpoints of an 8B-shaped draft are GBs
            if out:
                (out / "train_gpu_runs.txt").write_text("\n".join(lines + failures) + "\n")

    done = [name for name in names if rates[name]]
    expected = {name: 1 if name in args.once else args.repeats for name in names}
    failed = {name for name in names if any(f" {name}: FAILED" in line for line in failures)}
    if any(len(rates[name]) < expected[name] for name in set(names) - failed):
        print(
            f"time budget {args.time_budget_s}s reached: runs done "
            f"{ {name: len(rates[name]) for name in names} } of {expected}",
            flush=True,
        )
    names = done
    summary = [*failures]
    for name in names:
        summary.append(
            f"{name}: tokens/s median {statistics.median(rates[name]):.0f} (runs "
            f"{' '.join(f'{r:.0f}' for r in rates[name])}; spread {spread(rates[name]):.1%}); "
            f"start-up median {statistics.median(startups[name]):.1f}s"
        )
        summary.append(f"{name.replace('-', '_')}_tokens_per_s={statistics.median(rates[name]):.0f}")
        if span_rates[name]:
            summary.append(
                f"{name}: span tokens/s median {statistics.median(span_rates[name]):.0f} (runs "
                f"{' '.join(f'{r:.0f}' for r in span_rates[name])}; saves and validations between "
                f"timed epochs included)"
            )
    for name in names:
        if name == "ours" or not rates.get("ours"):
            continue
        if name == "gpu-bound":
            summary.append(
                f"gpu_bound_fraction={statistics.median(rates['ours']) / statistics.median(rates[name]):.3f} "
                f"(ours' median over the resident-batch step rate, {settings_loss} loss)"
            )
        elif name == "ours-fp8":
            paired = [a / b for a, b in zip(rates[name], rates["ours"])]
            summary.append(
                f"fp8_train_throughput_ratio={statistics.median(rates[name]) / statistics.median(rates['ours']):.3f} "
                f"(per repeat {' '.join(f'{r:.3f}' for r in paired)})"
            )
        else:
            key = "train_throughput_ratio" if name == "speculators" else f"train_throughput_ratio_vs_{name}"
            paired = [a / b for a, b in zip(rates["ours"], rates[name])]
            summary.append(
                f"{key}={statistics.median(rates['ours']) / statistics.median(rates[name]):.3f} "
                f"(per repeat {' '.join(f'{r:.3f}' for r in paired)})"
            )
            if span_rates["ours"] and span_rates[name]:
                summary.append(
                    f"{key}_span={statistics.median(span_rates['ours']) / statistics.median(span_rates[name]):.3f}"
                )
    summary.append(result_line(args, total_seq_len, draft_vocab, rates, span_rates, flops_per_token, peak))
    print("\n".join(summary), flush=True)
    if out:
        (out / "train_gpu.txt").write_text("\n".join(lines + summary) + "\n")


if __name__ == "__main__":
    main()
