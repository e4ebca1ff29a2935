"""The command line of each variant ``benchmarks/train_gpu.py`` times: ours, the ``speculators train`` CLI
(eager loss, its default fused loss, our worker count), the gpu-bound probe (as ours trains, and with
speculators' forced graph break in the draft layer taken out), and ours on fp8 features.

Needs the repository root on ``sys.path`` (the entry scripts put it there).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings

ROOT = Path(__file__).resolve().parent.parent
# The probe with the draft layer compiled as one graph (train_step_probe.py --without-forced-graph-break).
GPU_BOUND_NO_BREAK = "gpu-bound-no-break"
# The variants that run the probe (timed by its resident steps, not by epochs).
PROBE_VARIANTS = ("gpu-bound", GPU_BOUND_NO_BREAK)


def speculators_cli(
    settings: TrainingSettings,
    data,
    vocab,
    verifier: Path,
    layer_ids: list[int],
    mask_token_id: int,
    save: Path,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``python -m speculators train`` with our model/data flags and its own defaults otherwise."""
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

    def gpu_bound(save: Path, extra: tuple[str, ...] = ()) -> list[str]:
        argv = trainer.speculators_flags(settings, data, vocab, str(verifier), save / "checkpoints", on_cpu=False)
        probe = str(ROOT / "benchmarks" / "train_step_probe.py")
        return [sys.executable, probe, *probe_args, *extra, "--metrics-file", str(save / "metrics.jsonl"), "--", *argv]

    def cli(save: Path, extra: tuple[str, ...] = ()) -> list[str]:
        return speculators_cli(settings, data, vocab, verifier, layer_ids, mask_token_id, save, extra)

    def eager_cli(save: Path, extra: tuple[str, ...] = ()) -> list[str]:
        return cli(save, ("--loss-implementation", "eager", *extra))

    commands = {
        "ours": ours,
        "speculators": eager_cli,
        "gpu-bound": gpu_bound,
        GPU_BOUND_NO_BREAK: lambda save: gpu_bound(save, ("--without-forced-graph-break",)),
        f"speculators-w{workers}": lambda save: eager_cli(save, ("--num-workers", str(workers))),
        "speculators-fused": cli,
    }
    if fp8 is not None:
        commands["ours-fp8"] = lambda save: ours(save, *fp8)
    return commands
