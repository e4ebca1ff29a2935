"""Training process entry point: speculators' own ``train`` command, plus early stopping and a metrics file.

Run as ``python -m eagle_assets.eagle3_checkpoint.trainer_process.launch [OWN FLAGS] -- [speculators train flags]``
or, for several GPUs, ``torchrun --nproc_per_node=N -m eagle_assets.eagle3_checkpoint.trainer_process.launch ...``.
The flags after ``--`` are resolved by speculators' own ``TrainConfig.resolve`` and run by its ``train.cli.main``
(config, draft model, data loaders, trainer, checkpointer -- all speculators). This module adds:

- the CPU adaptations of :mod:`eagle_assets.eagle3_checkpoint.trainer_process.cpu` when CUDA is absent;
- loader workers that reuse their buffers (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.loader_workers`);
- batches copied to the GPU a step ahead on a side stream, FP8 features dequantized there rather than in
  the loader workers, each epoch's loading started while the previous epoch ends, and packed rows that
  end where their samples end, not padded to ``total_seq_len``
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.device_batches`);
- no host-device synchronisation in a training step outside logging steps
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.host_syncs`);
- Muon's Newton-Schulz iterations with their symmetric products computed once per pair of blocks
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.newton_schulz`);
- speculators' fused Triton loss made callable from the compiled draft
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.fused_loss`), when ``--loss-implementation fused``
  (speculators' default);
- the best epoch (``--save-best``) saved by a background thread while the next epoch trains, crash-safe
  (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.async_save`);
- early stopping: training ends once validation loss has not improved for ``--early-stop-patience``
  epochs (speculators has no such option);
- ``--metrics-file``: every metric record speculators logs, one JSON line each (rank 0), so the
  asset reports losses, per-step accuracies and tokens/s without parsing console text;
- a plain console log: one line per speculators message, per-step metric records summarised at most
  every ``--progress-seconds`` (a Dagster step log should not get a line per optimizer step).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path


class EarlyStop(Exception):
    """Raised from the trainer when validation loss stopped improving."""


def _own_flags(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m eagle_assets.eagle3_checkpoint.trainer_process.launch")
    parser.add_argument(
        "--early-stop-patience",
        type=int,
        default=0,
        help="Stop after this many epochs without a better validation loss (0: never).",
    )
    parser.add_argument("--metrics-file", type=Path, required=True, help="JSON-lines file for metric records.")
    parser.add_argument("--cpu-threads", type=int, default=1, help="Intra-op threads when training on CPU.")
    parser.add_argument(
        "--progress-seconds", type=float, default=5.0, help="Print a training progress line at most this often."
    )
    if "--" not in argv:
        parser.error("separate speculators' flags with '--'")
    split = argv.index("--")
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def _is_rank0() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


class MetricsRecorder(logging.Handler):
    """Appends speculators' metric records to a JSON-lines file and prints throttled progress."""

    def __init__(self, path: Path, progress_seconds: float):
        super().__init__()
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.progress_seconds = progress_seconds
        self._last_print = 0.0
        self._tokens = 0.0
        self._started = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if not isinstance(msg, Mapping) or getattr(record, "hparams", False) or not _is_rank0():
            return
        entry = {"time": time.time(), "step": getattr(record, "step", None), **msg}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(entry, default=float) + "\n")
        if "val" in msg:
            val = msg["val"]
            accs = " ".join(f"{val[k]:.3f}" for k in sorted(val) if k.startswith("full_acc_"))
            print(
                f"validation epoch {msg.get('epoch')}: loss {val.get('loss_epoch', float('nan')):.4f} "
                f"full_acc per ttt step {accs}",
                flush=True,
            )
        elif "train" in msg:
            now = time.monotonic()
            if now - self._last_print >= self.progress_seconds:
                self._last_print = now
                train, profile = msg["train"], msg.get("profile") or {}
                print(
                    f"epoch {msg.get('epoch')} step {msg.get('global_step')}: "
                    f"loss {train.get('loss', float('nan')):.4f} "
                    f"full_acc_0 {train.get('full_acc_0', float('nan')):.3f} "
                    f"tokens/s {profile.get('tokens_per_s', float('nan')):.0f}",
                    flush=True,
                )


# HTTP clients log one line per request: with online features that is a line per generated row.
_QUIET_BELOW_WARNING = ("httpx", "httpx2", "httpcore")


class ConsoleFilter(logging.Filter):
    """Drops metric dicts from the console (the recorder prints their summary) and HTTP clients' request
    lines below WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and record.name.split(".")[0] in _QUIET_BELOW_WARNING:
            return False
        return not isinstance(record.msg, Mapping)


def _configure_logging(recorder: MetricsRecorder) -> None:
    # A root handler installed first makes speculators' logging.basicConfig a no-op, so its Rich
    # console (which wraps lines to a guessed terminal width) stays out of a piped log.
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    console.addFilter(ConsoleFilter())
    logging.basicConfig(level=logging.INFO, handlers=[console])
    if not _is_rank0():
        console.setLevel(logging.WARNING)

    from speculators.train import cli

    original = cli.setup_metric_logger

    def setup_then_record(*args, **kwargs):
        original(*args, **kwargs)  # dictConfig resets the metrics logger's handlers: add ours after
        logging.getLogger("speculators.metrics").addHandler(recorder)

    cli.setup_metric_logger = setup_then_record


def _flag_value(argv: list[str], flag: str, default: str) -> str:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return default


def _install_trainer(patience: int, speculators_argv: list[str]) -> None:
    """speculators' trainer, data set and loss with this module's additions (see the module docstring)."""
    import torch
    from speculators.train import cli, dataloader, trainer

    # These import torch and speculators themselves: the module loads light for `--help` and argument errors.
    from speculators.train.checkpointer import SingleGPUCheckpointer
    from speculators.train.distributed import get_rank

    from eagle_assets.eagle3_checkpoint.trainer_process import host_syncs, newton_schulz
    from eagle_assets.eagle3_checkpoint.trainer_process.async_save import (
        BestCheckpointSaves,
        recover_interrupted_saves,
    )
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import (
        DeviceBatches,
        Fp8OnDeviceDataset,
        RowEndCollate,
    )
    from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import keep_memory_in

    host_syncs.install()
    if not newton_schulz.install():
        logging.getLogger("eagle_assets.eagle3_checkpoint").warning(
            "torch %s's Muon has no _zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps, eps): "
            "its own Newton-Schulz iterations run",
            torch.__version__,
        )
    dataloader.ArrowDataset = Fp8OnDeviceDataset
    dataloader.CollateFn = RowEndCollate
    if _flag_value(speculators_argv, "--loss-implementation", "fused") == "fused":
        from eagle_assets.eagle3_checkpoint.trainer_process import (
            fused_loss,  # imports Triton: only when the fused loss is asked for
        )

        fused_loss.install()

    def on_device(loader, device, last_epoch):
        if loader is None:
            return None
        pin = keep_memory_in(loader)
        fp8 = getattr(loader.dataset, "fp8_on_device", False)
        return DeviceBatches(loader, device, loader.dataset.dequantize_dtype if fp8 else None, last_epoch, pin)

    class EarlyStoppingTrainer(trainer.Trainer):
        """speculators' Trainer; stops once ``patience`` validations in a row did not improve."""

        def __init__(self, model, config, *args, **kwargs):
            if config.save_best and get_rank() == 0:
                recover_interrupted_saves(Path(config.save_path))  # before speculators looks for epochs
            super().__init__(model, config, *args, **kwargs)
            device = torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
            last_epoch = self.config.num_epochs - 1
            self.train_loader = on_device(self.train_loader, device, last_epoch)
            self.val_loader = on_device(self.val_loader, device, last_epoch)
            # DistributedCheckpointer (FSDP) gathers state dicts collectively: it keeps speculators' own save.
            background = config.save_best and isinstance(self.checkpointer, SingleGPUCheckpointer)
            self._best_saves = BestCheckpointSaves(self.checkpointer, self.rank) if background else None

        def run_training(self):
            try:
                super().run_training()
            finally:
                # Also on EarlyStop or an error: the process never ends before its best epoch is on disk, and a
                # failed save is raised here at the latest.
                if self._best_saves is not None:
                    self._best_saves.close()

        def maybe_save_checkpoint(self, epoch, local_step=0):
            if self._best_saves is not None and not isinstance(epoch, int):
                # speculators' interrupt save ("interrupted"): after the background save, whose cleanup
                # would otherwise delete it. Its error stays for run_training's close to raise.
                self._best_saves.wait()
            super().maybe_save_checkpoint(epoch, local_step=local_step)

        def train_epoch(self, epoch, **kwargs):
            super().train_epoch(epoch, **kwargs)
            # Between metric records nothing waits for the GPU: wait here, so the "Training epoch
            # ... completed" line marks the end of the epoch's GPU work and epoch times are true.
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if get_rank() == 0 and isinstance(self.train_loader, DeviceBatches):
                logging.getLogger("eagle_assets.eagle3_checkpoint").info(self.train_loader.wait.line(epoch))

        def maybe_update_best(self, epoch, val_metrics):
            before = self.best_val_loss
            if self._best_saves is None:
                super().maybe_update_best(epoch, val_metrics)
            else:
                self._best_saves.raise_error()  # a failed save stops training at the next validation
                # speculators' test (`not >=`: a NaN loss counts as there), its save handed to the writer
                if val_metrics is not None and "loss_epoch" in val_metrics and not val_metrics["loss_epoch"] >= before:
                    self.best_val_loss = val_metrics["loss_epoch"]
                    self._best_saves.save(self.model, self.optimizers, self.schedulers, epoch, val_metrics)
            improved = self.best_val_loss < before
            self._stale_epochs = 0 if improved else getattr(self, "_stale_epochs", 0) + 1
            if patience and self._stale_epochs >= patience:
                raise EarlyStop(
                    f"validation loss did not improve for {patience} epochs "
                    f"(best {self.best_val_loss:.4f}); stopping after epoch {epoch}"
                )

    cli.Trainer = EarlyStoppingTrainer


def main(argv: list[str] | None = None) -> None:
    own, speculators_argv = _own_flags(list(sys.argv[1:] if argv is None else argv))
    recorder = MetricsRecorder(own.metrics_file, own.progress_seconds)
    _configure_logging(recorder)

    from eagle_assets.eagle3_checkpoint.trainer_process import cpu

    if cpu.needs_cpu_adaptations():
        cpu.apply_cpu_adaptations(own.cpu_threads)
    _install_trainer(own.early_stop_patience, speculators_argv)

    import torch._dynamo
    from speculators.train.cli import main as speculators_main
    from speculators.train.config import TrainConfig

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import recompiles_for_rows

    config = TrainConfig.resolve(speculators_argv)
    needed = recompiles_for_rows(config.data.total_seq_len, config.loss.ttt_steps)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, needed)
    try:
        speculators_main(config)
    except EarlyStop as stop:
        from speculators.train.distributed import maybe_destroy_distributed

        logging.getLogger("eagle_assets.eagle3_checkpoint").info("early stop: %s", stop)
        maybe_destroy_distributed()


if __name__ == "__main__":
    main()
