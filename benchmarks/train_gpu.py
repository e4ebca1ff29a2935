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
- ``gpu-bound-no-break``: the same probe with speculators' forced graph break in the draft layer taken out
  (``--without-forced-graph-break``); beside ``gpu-bound`` (``--once`` empty, so both repeat) the summary
  prints ``no_break_step_ratio`` = median(no-break) / median(gpu-bound);
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
to epoch N's end, so the saves and validations between timed epochs count too (``ours``' loader builds the
next epoch's batches during them; the span rate shows that nothing was only moved out of the timed window;
``train_throughput_ratio_span``). Each process is stopped once its last epoch completes. Start-up (process
start to "epoch 1 started": imports, verifier head and data loads) is reported apart. Printed: every
setting of every side, each run's tokens/s, per variant the median and spread (max-min)/median, and
``train_throughput_ratio`` = median(ours) / median(speculators) (plus the same-workers ratio).

The last line, ``result shape=<preset> ...``, carries the headline figures: ``train_throughput_ratio_span``
(the span rates' ratio) before ``train_throughput_ratio`` (the timed epochs'), ``gpu_bound_fraction`` (and its
span twin), and ``mfu`` = ours' median rate x the draft's matmul FLOPs per token
(:func:`benchmarks.draft_shapes.train_flops_per_token`) / the bf16 matmul peak measured in the job (given to the
GPU-bound probe too, unless ``--probe-args`` names one).

Sizes: rows of ``--seq-len`` tokens (default 1536-2048); only ``--distinct-rows`` of them are different
tensor files (the rest repeat them under their own prompt ids), so writing the data costs seconds;
everything is flushed to disk before training and read from the page cache by every run alike.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The GPU host runs a plain checkout, without `pip install -e .`: the training process needs it too.
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from benchmarks.draft_shapes import PRESETS, layer_ids, resolved_sizes, train_flops_per_token  # noqa: E402
from benchmarks.draft_shapes import verifier_config as preset_config  # noqa: E402
from benchmarks.peak import matmul_peak  # noqa: E402
from benchmarks.train_data import write_data  # noqa: E402
from benchmarks.train_repeats import Repeats  # noqa: E402
from benchmarks.train_runs import StampedLog, tokens_per_epoch  # noqa: E402
from benchmarks.train_summary import report_missing, result_line, summary_lines  # noqa: E402
from benchmarks.train_variants import variant_commands  # noqa: E402
from benchmarks.train_warmup import first_run_bounds, warm_compile  # noqa: E402
from eagle_assets.eagle3_checkpoint import trainer  # noqa: E402
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings  # noqa: E402
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import loader_flags  # noqa: E402


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
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
        "--variants",
        nargs="*",
        default=None,
        help="subset of: ours speculators gpu-bound gpu-bound-no-break speculators-wN speculators-fused ours-fp8 "
        "(default: all)",
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
        "as its estimate, or the shortest run's for a variant not run yet), nor any run after it, so "
        "that a job resumed from --runs-file keeps the rotating order; the summary covers the runs done",
    )
    parser.add_argument(
        "--warm-compile",
        type=float,
        metavar="LIMIT_S",
        help="first run every training variant's first epoch in parallel, untimed, stopped after its first "
        "validation or LIMIT_S: their cold compilations overlap (benchmarks/train_warmup.py)",
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
    return parser, args


def cpu_smoke(data, vocab, fp8, verifier: Path, settings: TrainingSettings, work: Path) -> None:
    """No baseline on CPU: our path once (and on fp8 features), through the asset's entry point."""
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


def main() -> None:
    parser, args = parse_args()
    import torch

    config = preset_config(args.shape)
    captured = layer_ids(args.shape)
    draft_vocab, total_seq_len = resolved_sizes(args.shape)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    verifier, work = args.work / "verifier", args.work / "work"
    data, vocab, fp8, started = write_data(args, config, captured, draft_vocab, device)
    settings = TrainingSettings(
        epochs=args.epochs,
        draft_vocab_size=draft_vocab,
        total_seq_len=total_seq_len,
        lr=1e-3,
        early_stop_patience=0,
        log_every_steps=10,
    )
    if device == "cpu":
        cpu_smoke(data, vocab, fp8, verifier, settings, work)
        return

    workers = loader_flags(settings, data, on_cpu=False)["num_workers"]  # ours: the CLI's `-wN` variant gets it too
    settings_loss = "fused" if settings.loss_implementation == "auto" else settings.loss_implementation
    peak = matmul_peak()
    # The probe's MFU against the job's peak: measured again in its process, right after another GPU process
    # ended, one read 528.6 TFLOP/s against the job's 769.6.
    own_peak = () if "--peak-tflops" in args.probe_args else ("--peak-tflops", f"{peak / 1e12:.1f}")
    probe_args = (*args.probe_args.split(), "--shape", args.shape, *own_peak)
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
    warm_ups = warm_compile(commands, names, work, args.warm_compile) if args.warm_compile else []
    bounds = first_run_bounds(warm_ups, names)
    tally = Repeats(args, commands, work, epoch_tokens, settings_loss, started).run(names, setup_key, bounds)
    report_missing(names, tally, args.once, args.repeats, args.time_budget_s)
    names = [name for name in names if tally.rates[name]]
    summary = [warm.line for warm in warm_ups] + summary_lines(names, tally, settings_loss)
    summary.append(result_line(args, total_seq_len, draft_vocab, tally.rates, tally.span_rates, flops_per_token, peak))
    print("\n".join(summary), flush=True)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "train_gpu.txt").write_text("\n".join(tally.lines + summary) + "\n")


if __name__ == "__main__":
    main()
