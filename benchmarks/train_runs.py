"""Timed training processes for ``benchmarks/train_gpu.py`` (and ``scaling_gpu.py``): the stamped log that
times epochs from a process's own lines, one stopped-at-last-epoch run, the gpu-bound probe's run, and the
tokens one epoch trains.

Needs the repository root on ``sys.path`` (the entry scripts put it there).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from benchmarks.train_step_probe import AS_TRAINED, PROBE_LINE
from benchmarks.train_step_resident import LOADER_PROBE_LINE, REAL_PROBE_LINE
from eagle_assets.eagle3_checkpoint import trainer

EPOCH_LINE = re.compile(r"Training epoch (\d+)/(\d+) (started|completed)")
# ours' own line after each epoch (DeviceBatches' LoaderWait), its epoch counted from 0
LOADER_LINE = re.compile(r"epoch (\d+) loader: \d+ batches, ([\d.]+)s waiting")


class StampedLog:
    """Prints a training process's lines (``quiet``: only epoch lines) and remembers when epochs started and ended."""

    def __init__(self, name: str, quiet: bool = False):
        self.name = name
        self.quiet = quiet
        self.created = time.perf_counter()
        self.marks: dict[tuple[int, str], float] = {}
        self.loader_waits: dict[int, float] = {}  # by epoch, from 1 as the epoch lines count
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
        waited = LOADER_LINE.search(line)
        if waited:
            self.loader_waits[int(waited.group(1)) + 1] = float(waited.group(2))
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


class ProbeLog(StampedLog):
    """The probe's lines (all printed), its resident-step rates and when it started probing."""

    RATE = re.compile(rf"{PROBE_LINE} loss=(\w+) \({AS_TRAINED}\).*tokens_per_s=(\d+)")
    LOADER_RATE = re.compile(rf"{LOADER_PROBE_LINE} epoch=\d+ .*tokens_per_s=(\d+)")
    REAL_RATE = re.compile(rf"{REAL_PROBE_LINE} epoch=\d+ .*tokens_per_s=(\d+)")

    def __init__(self, name: str):
        super().__init__(name, quiet=False)
        self.rates: dict[str, float] = {}
        self.loader_rates: list[float] = []  # the loader path alone, per epoch (``--loader-epochs``)
        self.real_rates: list[float] = []  # the steps on the real loader path, per epoch (``--real-epochs``)
        self.probing: float | None = None

    def info(self, line: str) -> None:
        super().info(line)
        if line.startswith("probe:") and self.probing is None:
            self.probing = time.perf_counter()
        match = self.RATE.search(line)
        if match:
            self.rates[match.group(1)] = float(match.group(2))
        loader = self.LOADER_RATE.search(line)
        if loader:
            self.loader_rates.append(float(loader.group(1)))
        real = self.REAL_RATE.search(line)
        if real:
            self.real_rates.append(float(real.group(1)))


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


def timed_run(name: str, command: list[str], save: Path, epochs: int) -> StampedLog:
    """One training process, stopped once its last epoch completes (its last validation/save are untimed);
    raises ``TrainingFailed`` if it ends before."""
    save.mkdir(parents=True)
    log = StampedLog(name, quiet=True)
    trainer.run_streaming(command, log, cwd=save, done=lambda: (epochs, "completed") in log.marks)
    if (epochs, "completed") not in log.marks:
        raise trainer.TrainingFailed(f"{name} exited before epoch {epochs}/{epochs} completed")
    return log


def probe_run(name: str, command: list[str], save: Path, loss: str) -> tuple[float, float, ProbeLog]:
    """The gpu-bound probe: (tokens/s of resident steps with ``loss``, start-up seconds, its log)."""
    save.mkdir(parents=True)
    log = ProbeLog(name)
    trainer.run_streaming(command, log, cwd=save)
    if loss not in log.rates:
        raise trainer.TrainingFailed(f"{name} printed no resident rate for the {loss} loss")
    return log.rates[loss], log.probing - log.created, log
