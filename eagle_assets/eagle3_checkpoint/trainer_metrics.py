"""What a training process's ``metrics.jsonl`` says: the best epoch's validation metrics and the rate."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path


class TrainingFailed(RuntimeError):
    """The training process exited with an error; the message holds the end of its log."""


def _wall_clock_rates(trains: list[dict]) -> list[float]:
    """Tokens/s between consecutive metric records of one epoch: steps between them x tokens per step /
    seconds between them. speculators' own per-step figure starts its clock, for a record after
    unlogged steps, before the GPU has drained them, so it reads low when ``log_freq`` > 1."""
    rates = []
    for before, after in itertools.pairwise(trains):
        profile = after.get("profile") or {}
        seconds = after["time"] - before["time"]
        if after.get("epoch") != before.get("epoch") or seconds <= 0 or not profile.get("step_ms"):
            continue
        tokens_per_step = profile["tokens_per_s"] * profile["step_ms"] / 1000
        rates.append((after["global_step"] - before["global_step"]) * tokens_per_step / seconds)
    return rates


def summarize_metrics(metrics_file: Path) -> dict:
    """Best-epoch validation metrics, last training loss and median tokens/s from the metrics file."""
    records = [json.loads(line) for line in Path(metrics_file).read_text().splitlines() if line.strip()]
    vals = [r for r in records if "val" in r and "loss_epoch" in r["val"]]
    trains = [r for r in records if "train" in r]
    if not vals:
        raise TrainingFailed(f"{metrics_file} holds no validation record: training ended before one epoch")
    best = min(vals, key=lambda r: r["val"]["loss_epoch"])
    rates = _wall_clock_rates(trains) or [
        r["profile"]["tokens_per_s"] for r in trains if (r.get("profile") or {}).get("tokens_per_s")
    ]
    summary = {
        "best_epoch": int(best["epoch"]),
        "epochs_run": len(vals),
        "val_loss": best["val"]["loss_epoch"],
        "train_loss": trains[-1]["train"].get("loss") if trains else None,
        "train_steps": int(trains[-1]["global_step"]) + 1 if trains else 0,
        "tokens_per_s": statistics.median(rates) if rates else None,
    }
    for key, value in best["val"].items():
        if key.startswith(("full_acc_", "cond_acc_")):
            summary[f"val_{key.removesuffix('_epoch')}"] = value
    return summary
