"""Start the training process (speculators' trainer via
:mod:`~eagle_assets.eagle3_checkpoint.trainer_process.launch`) and stream its log.

Training runs in a child process -- ``python -m eagle_assets.eagle3_checkpoint.trainer_process.launch`` or, for
several GPUs, ``torchrun -m eagle_assets.eagle3_checkpoint.trainer_process.launch`` -- started with an argument
list. The child's output is forwarded line by line to the caller's logger (the Dagster step log), so progress stays
visible, and the CPU patches never touch the calling process. A run folder is named by a hash of the data and
settings: re-running after a crash resumes from speculators' last epoch checkpoint, and a finished run is reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.core.child_process import die_with_parent
from eagle_assets.core.files import combined_hash, write_json
from eagle_assets.core.layout import TRAINER_DONE_FILE, TRAINER_FOLDER_PREFIX
from eagle_assets.eagle3_checkpoint.settings import RESOLVED_FIELDS, TrainingSettings
from eagle_assets.eagle3_checkpoint.trainer_metrics import TrainingFailed, summarize_metrics
from eagle_assets.eagle3_checkpoint.trainer_process.cpu import needs_cpu_adaptations
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import loader_flags
from eagle_assets.eagle3_checkpoint.training_data import TrainingData
from eagle_assets.eagle3_checkpoint.vocab import DraftVocab
from eagle_assets.hidden_states.files import TRAINER_BACKENDS

# NVLink multicast (NVLS) off unless the caller's environment says otherwise: a small draft's DDP
# all-reduce does not need it, and on shared hosts a job using it can take the GPUs out of service.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


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
    settings: TrainingSettings,
    data: TrainingData,
    vocab: DraftVocab,
    verifier_path: str,
    save_path: Path,
    on_cpu: bool,
    endpoint: str | None = None,
) -> list[str]:
    """The ``speculators train`` flags for this run; ``endpoint``: the extraction server's base URL, which
    computes the hidden states of every row without a file (``features: online``)."""
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
    compute_dtype = settings.compute_dtype
    if compute_dtype == "auto":
        compute_dtype = "float32" if on_cpu else "bfloat16"
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
        # Stored: every row has its hidden states; never ask a vLLM server for more.
        "on_missing": "generate" if endpoint else "raise",
        "log_freq": settings.log_every_steps,
        # The hs-connectors reader for the features' storage dtype ("fp8" dequantizes on load): no conversion.
        "hidden_states_backend": TRAINER_BACKENDS[data.manifest.dtype],
        "hidden_states_dtype": compute_dtype,
    }
    flags.update(loader_flags(settings, data, on_cpu))
    if endpoint:
        flags["vllm_endpoint"] = endpoint
    argv = []
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    argv += ["--target-layer-ids", *map(str, data.manifest.aux_layer_ids), "--save-best"]
    return argv


def resolve_process_count(num_processes: int, on_cpu: bool, visible: int | None = None) -> int:
    """Training processes to start: one per GPU. ``0`` means every visible GPU (``visible``, else what this
    process sees; one process without GPUs). More processes than visible GPUs would share devices (or fail
    inside torchrun with a CUDA error far from the setting), so that is refused; on CPU any count runs (gloo)."""
    import torch

    visible = torch.cuda.device_count() if visible is None else visible
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


def process_env(devices: dict[str, str] | None = None, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The training process's environment: the caller's (``environ``), multicast off by default, unbuffered
    output, and ``devices`` (``CUDA_VISIBLE_DEVICES`` of an online run's trainer)."""
    return {**MULTICAST_OFF, **environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", **(devices or {})}


def _watched(proc: subprocess.Popen, watch: Callable[[], str | None], found: list[str]) -> threading.Event:
    """Poll ``watch`` each second while ``proc`` runs; kill ``proc`` once it names a problem (into ``found``).
    Set the returned event to stop watching."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(1.0) and proc.poll() is None:
            if (problem := watch()) is not None:
                found.append(problem)
                proc.kill()
                return

    threading.Thread(target=loop, name="trainer-watch", daemon=True).start()
    return stop


def run_streaming(
    command: list[str],
    log,
    cwd: Path,
    done: Callable[[], bool] | None = None,
    watch: Callable[[], str | None] | None = None,
    devices: dict[str, str] | None = None,
) -> None:
    """Run ``command``, forwarding each output line to ``log.info``; raise with the log's tail on failure.

    ``done``, checked after each line: once it is true nothing more is wanted from the process, which is
    killed (a benchmark stops a trainer once its timed epochs are over). ``watch``, polled each second:
    a problem it names (a dead extraction server) kills the process and is the error raised. ``devices``: see
    :func:`process_env`."""
    env = process_env(devices)
    tail: deque[str] = deque(maxlen=40)
    problems: list[str] = []
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
    stop_watching = _watched(proc, watch, problems) if watch is not None else threading.Event()
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
    finally:
        stop_watching.set()
    if problems:
        raise TrainingFailed(f"training stopped: {problems[0]}")
    if code != 0:
        raise TrainingFailed(f"training exited with code {code}; last lines:\n" + "\n".join(tail))


def train(
    data: TrainingData,
    vocab: DraftVocab,
    verifier_path: str,
    settings: TrainingSettings,
    work_root: Path,
    log,
    serve: Callable[[], AbstractContextManager] | None = None,
) -> TrainerResult:
    """Train (or resume, or reuse) the run for these inputs; return its best checkpoint folder.
    ``settings`` must be complete (:func:`~eagle_assets.eagle3_checkpoint.settings.resolve_settings`).
    ``serve`` (``features: online``): entered around the training process only, it yields the
    extraction server (``url``, ``problem()``)."""
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
    with serve() if serve is not None else nullcontext() as server:
        # Resolved after the trainer folder is named: it stays keyed by the setting as given ("0" = every GPU,
        # an online run's trainer: every GPU of its share).
        visible = len(server.split.trainer) if server is not None and server.split.trainer else None
        processes = resolve_process_count(settings.num_processes, on_cpu, visible)
        settings = settings.model_copy(update={"num_processes": processes})
        endpoint = server.url if server is not None else None
        argv = speculators_flags(settings, data, vocab, verifier_path, save_path, on_cpu, endpoint)
        command = launch_command(settings, metrics_file, argv)
        log.info(f"training on {'CPU' if on_cpu else 'GPU'}: {' '.join(command)}")
        run_streaming(
            command,
            log,
            cwd=folder,
            watch=server.problem if server is not None else None,
            devices=server.split.trainer_env() if server is not None else None,
        )
    if not best_dir.exists():
        raise TrainingFailed(f"training finished without {best_dir}: no validation epoch completed")
    summary = summarize_metrics(metrics_file)
    write_json(summary, done)
    return TrainerResult(folder, best_dir.resolve(), summary)
