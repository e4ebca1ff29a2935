"""Start the training process (speculators' trainer via
:mod:`~eagle_assets.eagle3_checkpoint.trainer_process.launch`) and stream its log.

Training runs in a child process -- ``python -m eagle_assets.eagle3_checkpoint.trainer_process.launch`` or, for
several GPUs, ``torchrun -m eagle_assets.eagle3_checkpoint.trainer_process.launch`` -- started with an argument
list. The child's output is forwarded line by line to the caller's logger (the Dagster step log), so progress stays
visible, and the CPU patches never touch the calling process. A run folder is named by a hash of the data and
settings: re-running after a crash resumes from speculators' last epoch checkpoint, and a finished run is reused.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.core.child_process import die_with_parent
from eagle_assets.core.files import combined_hash, write_json
from eagle_assets.core.layout import TRAINER_DONE_FILE, TRAINER_FOLDER_PREFIX
from eagle_assets.eagle3_checkpoint.settings import RESOLVED_FIELDS, TrainingSettings
from eagle_assets.eagle3_checkpoint.trainer_process.cpu import needs_cpu_adaptations
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import gpu_worker_count
from eagle_assets.eagle3_checkpoint.training_data import TrainingData
from eagle_assets.eagle3_checkpoint.vocab import DraftVocab
from eagle_assets.hidden_states.files import TRAINER_BACKENDS

# NVLink multicast (NVLS) off unless the caller's environment says otherwise: a small draft's DDP
# all-reduce does not need it, and on shared hosts a job using it can take the GPUs out of service.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


class TrainingFailed(RuntimeError):
    """The training process exited with an error; the message holds the end of its log."""


@dataclass(frozen=True)
class TrainerResult:
    folder: Path
    best_dir: Path
    summary: dict


def trainer_folder_for(work_root: Path, data: TrainingData, settings: TrainingSettings) -> Path:
    key = combined_hash([data.content_hash, settings.model_dump_json(), data.manifest.verifier_id])
    return Path(work_root) / f"{TRAINER_FOLDER_PREFIX}{key[:16]}"


def _mask_token_id(verifier_path: str) -> int:
    # EAGLE-3 never reads the mask token; naming one keeps speculators from loading a tokenizer
    # just to look it up (a head-only verifier folder has none).
    config = json.loads((Path(verifier_path) / "config.json").read_text())
    config = config.get("text_config", config)
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = config.get(key)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, int):
            return value
    return 0


def speculators_flags(
    settings: TrainingSettings, data: TrainingData, vocab: DraftVocab, verifier_path: str, save_path: Path, on_cpu: bool
) -> list[str]:
    """The ``speculators train`` flags for this run."""
    attention = settings.attention_impl
    if attention == "auto":
        attention = "sdpa" if on_cpu else "simple_flex_attention"
    if on_cpu and attention == "simple_flex_attention":
        raise ValueError("attention_impl 'simple_flex_attention' has no CPU backward: use 'sdpa' or 'auto' on CPU")
    loss = settings.loss_implementation
    if loss == "auto":
        loss = "eager" if on_cpu else "fused"
    if on_cpu and loss == "fused":
        raise ValueError("loss_implementation 'fused' is a GPU (Triton) kernel: use 'eager' or 'auto' on CPU")
    flags = {
        "speculator_type": "eagle3",
        "verifier_name_or_path": verifier_path,
        "data_path": str(data.path),
        "save_path": str(save_path),
        "log_dir": str(save_path.parent / "logs"),
        "num_layers": settings.num_layers,
        "ttt_steps": settings.ttt_steps,
        "lr": settings.lr,
        "epochs": settings.epochs,
        "draft_vocab_size": vocab.size,
        "d2t_path": str(vocab.d2t_path),
        "t2d_path": str(vocab.t2d_path),
        "total_seq_len": settings.total_seq_len,
        "draft_attn_impl": attention,
        # Fused on GPU works under torch.compile through eagle_assets.eagle3_checkpoint.trainer_process.fused_loss.
        "loss_implementation": loss,
        "seed": settings.seed,
        # The validation split's rows are the dataset's tail: speculators validates on exactly them.
        "train_data_ratio": data.train_data_ratio,
        "mask_token_id": _mask_token_id(verifier_path),
        "on_missing": "raise",  # every row has its hidden states; never ask a vLLM server for more
        "log_freq": settings.log_every_steps,
        # The hs-connectors reader for the features' storage dtype ("fp8" dequantizes on load): no conversion.
        "hidden_states_backend": TRAINER_BACKENDS[data.manifest.dtype],
    }
    workers = settings.dataloader_workers
    if workers is None:
        # On CPU spawned loader processes cost more than they save; on GPU hosts speculators' fixed
        # 12 workers left an H200 waiting for batches (see loader_workers).
        workers = 0 if on_cpu else gpu_worker_count(settings.num_processes)
    flags["num_workers"] = workers
    argv = []
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    argv += ["--target-layer-ids", *map(str, data.manifest.aux_layer_ids), "--save-best"]
    return argv


def resolve_process_count(num_processes: int, on_cpu: bool) -> int:
    """Training processes to start: one per GPU. ``0`` means every visible GPU (one process without
    GPUs). More processes than visible GPUs would share devices (or fail inside torchrun with a CUDA
    error far from the setting), so that is refused; on CPU any count runs (gloo)."""
    import torch

    visible = torch.cuda.device_count()
    if num_processes == 0:
        return 1 if on_cpu else visible
    if not on_cpu and num_processes > visible:
        raise ValueError(
            f"num_processes={num_processes} but this host shows {visible} CUDA GPU(s): "
            f"set num_processes to at most {visible}, or 0 for every GPU (one training process per GPU)"
        )
    return num_processes


def launch_command(settings: TrainingSettings, metrics_file: Path, speculators_argv: list[str]) -> list[str]:
    own = [
        "--metrics-file",
        str(metrics_file),
        "--early-stop-patience",
        str(settings.early_stop_patience),
        "--cpu-threads",
        str(settings.cpu_threads),
    ]
    if settings.num_processes > 1:
        head = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={settings.num_processes}",
        ]
    else:
        head = [sys.executable]
    return [*head, "-m", "eagle_assets.eagle3_checkpoint.trainer_process.launch", *own, "--", *speculators_argv]


def process_env() -> dict[str, str]:
    """The training process's environment: the caller's, multicast off by default, unbuffered output."""
    return {**MULTICAST_OFF, **os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}


def run_streaming(command: list[str], log, cwd: Path, done: Callable[[], bool] | None = None) -> None:
    """Run ``command``, forwarding each output line to ``log.info``; raise with the log's tail on failure.

    ``done``, checked after each line: once it is true nothing more is wanted from the process, which is
    killed (a benchmark stops a trainer once its timed epochs are over)."""
    env = process_env()
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=cwd,
        env=env,
        preexec_fn=die_with_parent,
    )
    try:
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                tail.append(line)
                log.info(line)
            if done is not None and done():
                proc.kill()
                proc.wait()
                return
        code = proc.wait()
    except BaseException:
        # Interrupted (e.g. the run was cancelled): SIGTERM lets speculators save an interrupt checkpoint.
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if code != 0:
        raise TrainingFailed(f"training exited with code {code}; last lines:\n" + "\n".join(tail))


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


def train(
    data: TrainingData, vocab: DraftVocab, verifier_path: str, settings: TrainingSettings, work_root: Path, log
) -> TrainerResult:
    """Train (or resume, or reuse) the run for these inputs; return its best checkpoint folder.
    ``settings`` must be complete (:func:`~eagle_assets.eagle3_checkpoint.settings.resolve_settings`)."""
    unset = [name for name in RESOLVED_FIELDS if getattr(settings, name) is None]
    if unset:
        raise ValueError(
            f"training settings {unset} are unset: set them, or fill them for the verifier with "
            "eagle_assets.eagle3_checkpoint.settings.resolve_settings"
        )

    folder = trainer_folder_for(work_root, data, settings)
    save_path = folder / "checkpoints"
    metrics_file = folder / "metrics.jsonl"
    best_dir = save_path / "checkpoint_best"
    done = folder / TRAINER_DONE_FILE
    if done.exists() and best_dir.exists():
        log.info(f"trainer folder {folder} already finished: reusing its best checkpoint")
        return TrainerResult(folder, best_dir.resolve(), json.loads(done.read_text()))
    folder.mkdir(parents=True, exist_ok=True)
    on_cpu = needs_cpu_adaptations()
    # Resolved after the trainer folder is named: it stays keyed by the setting as given ("0" = every GPU).
    settings = settings.model_copy(update={"num_processes": resolve_process_count(settings.num_processes, on_cpu)})
    argv = speculators_flags(settings, data, vocab, verifier_path, save_path, on_cpu)
    command = launch_command(settings, metrics_file, argv)
    log.info(f"training on {'CPU' if on_cpu else 'GPU'}: {' '.join(command)}")
    run_streaming(command, log, cwd=folder)
    if not best_dir.exists():
        raise TrainingFailed(f"training finished without {best_dir}: no validation epoch completed")
    summary = summarize_metrics(metrics_file)
    write_json(summary, done)
    return TrainerResult(folder, best_dir.resolve(), summary)
