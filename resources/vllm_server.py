"""The vLLM server the ``reasoning_samples`` asset talks to: started, attached to, or just addressed.

Modes:

* ``managed`` — start ``python -m vllm.entrypoints.openai.api_server`` as a subprocess (an argument
  list, never a shell string), stream its log into the Dagster step log, stop it on exit (SIGTERM,
  then SIGKILL after a grace period) unless ``keep_alive``. A server this resource started earlier
  with the same launch fingerprint (e.g. kept alive, or started by a concurrent step) is attached to
  instead of starting a second one; the fingerprint lives in a small state file per host:port, and
  each ``serve()`` leaves a marker so that the last user out, not the launcher, stops a shared server.
  The state files are named by machine, bind address and port, so hosts may share the state folder.
  A server left without a live user (kept alive, or its user was killed) for ``idle_stop_after_s``
  is stopped by the next run or command that looks (``server_registry``; ``eagle-assets servers``).
* ``systemd`` — ``systemctl start``/``stop`` a unit that runs the server; readiness as above.
* ``external`` — one or more base URLs of servers run by someone else (data-parallel replicas).

Readiness is ``/health`` and ``/v1/models`` answering 200, waited for up to ``startup_timeout_s``
(large models load for tens of minutes) while checking that the server process is still alive.
The API key is read from the environment variable ``api_key_env`` and handed to vLLM through its
environment (``VLLM_API_KEY``), never through argv, and never logged.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import dagster as dg
import httpx
from pydantic import Field

from eagle_assets.core.files import write_json
from eagle_assets.resources.server_process import (
    VLLM_MODULE,
    CommandFollower,
    Heartbeat,
    LogFollower,
    live_users,
    note_last_seen,
    pid_is_vllm,
    port_in_use,
    read_tail,
    register_user,
    stop_process_group,
)
from eagle_assets.resources.server_registry import DEFAULT_IDLE_STOP_S, HOSTNAME_KEY, stop_idle_servers, this_host
from eagle_assets.tiny_verifier.embedded import embedded_verifier

CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
_fallback_log = logging.getLogger("eagle_assets.vllm_server")


class VLLMServerError(RuntimeError):
    """The server could not be started, attached to, or reached; the message says why and what to do."""


def default_state_dir() -> Path:
    cache = os.environ.get("EAGLE_ASSETS_CACHE") or str(Path.home() / ".cache" / "eagle-assets")
    return Path(cache) / "vllm-servers"


def server_state_dir(configured: str | Path | None) -> Path:
    """The managed servers' state folder: ``configured`` (``vllm_server.state_dir``), else the default."""
    return Path(configured) if configured else default_state_dir()


class VLLMServer(dg.ConfigurableResource):
    """An OpenAI-compatible vLLM server: `with server.serve(log=context.log) as base_urls: ...`."""

    mode: Literal["managed", "systemd", "external"] = Field(
        default="managed",
        description="managed: start/attach a local subprocess; systemd: start/stop a unit; "
        "external: use base_urls as they are.",
    )
    model: str = Field(
        default="",
        description="Model path or name for managed mode; empty serves the embedded verifier named by `embedded`.",
    )
    embedded: str = Field(
        default="tiny-qwen3",
        description="The embedded verifier served when model is empty: tiny-qwen3 or tiny-kimi (serve tiny-kimi "
        "with reasoning_parser kimi_k2; its required vLLM arguments are added).",
    )
    served_model_name: str = Field(default="", description="Name the server answers to (default: the model path).")
    host: str = Field(default="127.0.0.1", description="Interface to bind (managed) and to reach (managed/systemd).")
    port: int = Field(default=8000, description="Port of the managed/systemd server.")
    tensor_parallel_size: int = Field(default=1, description="GPUs per replica (8 for Kimi-K2.5).")
    reasoning_parser: str = Field(
        default="qwen3", description="vLLM --reasoning-parser (qwen3, kimi_k2, deepseek_r1, ...); empty for none."
    )
    max_num_seqs: int = Field(default=256, description="vLLM --max-num-seqs: sequences batched at once.")
    max_model_len: int = Field(
        default=0, description="vLLM --max-model-len (>= longest prompt + max_tokens); 0 = the model's own."
    )
    gpu_memory_utilization: float = Field(
        default=0.0, description="vLLM --gpu-memory-utilization (fraction of GPU memory); 0 = vLLM's default."
    )
    trust_remote_code: bool = Field(default=False, description="Pass --trust-remote-code (Kimi-K2.5 needs it).")
    extra_args: list[str] = Field(default_factory=list, description="More vLLM arguments, one list item each.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for the server (e.g. VLLM_CPU_KVCACHE_SPACE)."
    )
    api_key_env: str = Field(
        default="VLLM_API_KEY",
        description="Environment variable holding the API key (read at run time, never logged); unset = no key.",
    )
    systemd_unit: str = Field(default="", description="Unit name for systemd mode.")
    systemd_user: bool = Field(default=False, description="Use `systemctl --user` in systemd mode.")
    base_urls: list[str] = Field(
        default_factory=list, description="External mode: OpenAI base URLs (http://host:port/v1), one per replica."
    )
    startup_timeout_s: float = Field(
        default=1800.0, description="How long to wait for readiness; large models load for ~25 minutes."
    )
    stop_grace_s: float = Field(default=30.0, description="Seconds between SIGTERM and SIGKILL on stop.")
    keep_alive: bool = Field(default=False, description="Leave the server running after the step (later steps attach).")
    idle_stop_after_s: float = Field(
        default=DEFAULT_IDLE_STOP_S,
        ge=0,
        description="A managed server with no live user (kept alive, or orphaned by a killed run) for this many "
        "seconds is stopped by the next run or eagle-assets command that looks. Default 1 h: longer than a "
        "Kimi-K2.5 reload (~25 min), far shorter than eight idle GPUs overnight. 0 = never.",
    )
    state_dir: str = Field(
        default="", description="Where launch fingerprints and server logs live (default: <cache>/vllm-servers)."
    )

    @classmethod
    def kimi_k25(cls, model: str = "moonshotai/Kimi-K2.5", **overrides) -> VLLMServer:
        """The production preset: Kimi-K2.5 on one 8-GPU host (TP 8, kimi_k2 reasoning parser)."""
        preset = dict(
            mode="managed",
            model=model,
            served_model_name="kimi-k2.5",
            tensor_parallel_size=8,
            reasoning_parser="kimi_k2",
            trust_remote_code=True,
            max_num_seqs=256,
            max_model_len=32768,  # prompts up to 24K tokens + 8K new tokens
            gpu_memory_utilization=0.90,
            startup_timeout_s=3600.0,
            stop_grace_s=120.0,
        )
        return cls(**{**preset, **overrides})

    # ----------------------------------------------------------------- launch description
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        return str(embedded_verifier(self.embedded).path())

    def command(self, model: str) -> list[str]:
        """The managed server's argv (no secrets in it)."""
        argv = [sys.executable, "-m", VLLM_MODULE, "--model", model, "--host", self.host, "--port", str(self.port)]
        argv += ["--tensor-parallel-size", str(self.tensor_parallel_size), "--max-num-seqs", str(self.max_num_seqs)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.reasoning_parser:
            argv += ["--reasoning-parser", self.reasoning_parser]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.gpu_memory_utilization:
            argv += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.trust_remote_code:
            argv.append("--trust-remote-code")
        # One access-log line per request would flood the step log at 200 in flight.
        argv.append("--disable-uvicorn-access-log")
        if not self.model:
            argv += embedded_verifier(self.embedded).serve_args
        return argv + list(self.extra_args)

    def launch_env(self) -> dict[str, str]:
        """The environment added to the server's (the API key aside)."""
        env = dict(self.env)
        if not self.model:
            # The embedded tiny verifier needs megabytes of KV cache; without this vllm-cpu would
            # reserve 92 % of RAM (and fail when that is not free). GPU builds ignore the variable.
            env.setdefault(CPU_KV_CACHE_ENV, os.environ.get(CPU_KV_CACHE_ENV, "1"))
        return env

    def fingerprint(self, argv: list[str], env: dict[str, str]) -> str:
        """Identity of a launch: argv, added env and (a hash of) the API key."""
        key = self.api_key()
        ident = {
            "argv": argv[1:],  # the interpreter path may differ between equivalent venvs
            "env": dict(sorted(env.items())),
            "api_key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else None,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def _client_host(self) -> str:
        return "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host

    def _own_urls(self) -> list[str]:
        return [f"http://{self._client_host()}:{self.port}/v1"]

    def _state_paths(self) -> tuple[Path, Path, Path]:
        folder = server_state_dir(self.state_dir)
        folder.mkdir(parents=True, exist_ok=True)
        # The machine first: hosts sharing the folder (NFS) keep their own state, users and lock.
        stem = f"{this_host()}-{self.host or 'all'}-{self.port}"
        return folder / f"{stem}.json", folder / f"{stem}.log", folder / f"{stem}.lock"

    # ----------------------------------------------------------------- serving
    @contextmanager
    def serve(self, log=None) -> Iterator[list[str]]:
        """Make the server ready and yield its OpenAI base URLs; stop it afterwards if this call started it."""
        log = log or _fallback_log
        if self.mode == "external":
            if not self.base_urls:
                raise VLLMServerError("vllm_server mode 'external' needs base_urls (e.g. ['http://host:8000/v1']).")
            urls = [url.rstrip("/") for url in self.base_urls]
            log.info(f"vLLM server: using external base URLs {urls}")
            self._wait_ready(urls, log, alive=lambda: None)
            yield urls
        elif self.mode == "systemd":
            with self._serve_systemd(log) as urls:
                yield urls
        else:
            with self._serve_managed(log) as urls:
                yield urls

    def _wait_ready(self, urls: list[str], log, alive: Callable[[], str | None]) -> None:
        """Poll ``/health`` and ``/v1/models`` of every URL until all answer 200.

        ``alive`` returns a reason when the server is known to be gone: then fail at once.
        """
        headers = {"Authorization": f"Bearer {key}"} if (key := self.api_key()) else {}
        deadline = time.monotonic() + self.startup_timeout_s
        started, last_note = time.monotonic(), time.monotonic()
        waiting = list(urls)
        with httpx.Client(timeout=10.0, headers=headers) as http:
            while waiting:
                if (reason := alive()) is not None:
                    raise VLLMServerError(reason)
                last_problem = ""
                for url in list(waiting):
                    root = url.removesuffix("/v1")
                    try:
                        # /health is vLLM's; a proxy or router in front may only serve /v1/models.
                        health = http.get(f"{root}/health")
                        models = http.get(f"{url}/models")
                        if models.status_code == 200 and health.status_code in (200, 404):
                            waiting.remove(url)
                            continue
                        last_problem = f"{url}: /health {health.status_code}, /v1/models {models.status_code}"
                    except httpx.HTTPError as exc:
                        last_problem = f"{url}: {exc!r}"
                if not waiting:
                    break
                now = time.monotonic()
                if now >= deadline:
                    raise VLLMServerError(
                        f"vLLM server not ready after {self.startup_timeout_s:g}s ({last_problem}). "
                        "Check the server (its log), the base URL/port, or raise startup_timeout_s."
                    )
                if now - last_note >= 30:
                    log.info(f"vLLM server: waiting for readiness ({now - started:.0f}s; {last_problem})")
                    last_note = now
                time.sleep(1.0)
        log.info(f"vLLM server: ready at {urls} after {time.monotonic() - started:.1f}s")

    @contextmanager
    def _serve_managed(self, log) -> Iterator[list[str]]:
        argv, env = self.command(self.resolved_model()), self.launch_env()
        fingerprint = self.fingerprint(argv, env)
        state_path, log_path, lock_path = self._state_paths()
        users_dir = state_path.with_suffix(".users")
        stop_idle_servers(state_path.parent, log, keep=state_path.stem)
        with open(lock_path, "w") as lock:
            # Serialize check-then-launch, so two steps starting together launch one server.
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read_state(state_path)
            if state and pid_is_vllm(state["pid"]):
                if state["fingerprint"] != fingerprint:
                    raise VLLMServerError(
                        f"port {self.port} belongs to a vLLM server started with a different configuration "
                        f"(pid {state['pid']}, fingerprint {state['fingerprint']} != {fingerprint}; "
                        f"its argv is in {state_path}). Stop it or choose another port."
                    )
                proc = None
                offset = log_path.stat().st_size if log_path.exists() else 0
                log.info(f"vLLM server: attaching to running server pid {state['pid']} (fingerprint {fingerprint})")
            else:
                if port_in_use(self._client_host(), self.port):
                    raise VLLMServerError(
                        f"port {self.port} on {self._client_host()} is already in use by another process "
                        "(not a vLLM server started by eagle-assets). Choose a free port (vllm_server.port) "
                        "or stop that process."
                    )
                proc, offset = self._launch(argv, env, fingerprint, state_path, log_path, log), 0
                state = {"pid": proc.pid}
            me = register_user(users_dir)
        heartbeat = Heartbeat(me)
        follower = LogFollower(log_path, log.info, offset)
        pid = state["pid"]

        def alive() -> str | None:
            dead = proc.poll() is not None if proc is not None else not pid_is_vllm(pid)
            if not dead:
                return None
            code = f" with exit code {proc.returncode}" if proc is not None else ""
            return (
                f"the vLLM server (pid {pid}) exited{code} before it was ready. Last lines of {log_path}:\n"
                f"{read_tail(log_path)}"
            )

        try:
            # Started inside the try: whatever fails from here on, the user leaves (marker, heartbeat).
            heartbeat.start()
            log_path.touch()  # an attached server's log may have been cleaned away
            follower.start()
            self._wait_ready(self._own_urls(), log, alive)
            yield self._own_urls()
        finally:
            follower.stop()
            heartbeat.stop()
            self._leave(me, users_dir, state_path, lock_path, pid, proc, log)

    def _leave(
        self, me: Path, users_dir: Path, state_path: Path, lock_path: Path, pid: int, proc: subprocess.Popen | None, log
    ) -> None:
        """The last user out stops the server, unless its launch asked to keep it alive.

        Steps of one run may share a server (the second attaches while the first still works): the
        launcher must not stop it under them, so stopping waits for the last one.
        """
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            me.unlink(missing_ok=True)
            note_last_seen(users_dir)
            others = live_users(users_dir)
            state = self._read_state(state_path) or {}
            if others:
                log.info(f"vLLM server: pid {pid} is still used by {others} other step(s); the last one stops it")
            elif state.get("stop_when_unused", True):
                stop_process_group(pid, self.stop_grace_s, log, child=proc)
                state_path.unlink(missing_ok=True)
            else:
                log.info(f"vLLM server: keep_alive, leaving pid {pid} running on port {self.port}")

    @staticmethod
    def _read_state(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def _launch(
        self, argv: list[str], added_env: dict[str, str], fingerprint: str, state_path: Path, log_path: Path, log
    ) -> subprocess.Popen:
        env = {**os.environ, **added_env}
        if key := self.api_key():
            env["VLLM_API_KEY"] = key  # vLLM reads it; argv (visible in ps) never holds it
        # Values are not logged: extra env may hold secrets too.
        log.info(f"vLLM server: starting {argv} with extra env keys {sorted(added_env)}; log: {log_path}")
        with open(log_path, "w") as log_file:
            # Own session: the server's worker processes are stopped with it, as one process group.
            proc = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        write_json(
            {
                "pid": proc.pid,
                "fingerprint": fingerprint,
                "argv": argv,
                "log": str(log_path),
                "started_at": time.time(),
                "stop_when_unused": not self.keep_alive,
                "idle_stop_after_s": self.idle_stop_after_s,
                "stop_grace_s": self.stop_grace_s,
                HOSTNAME_KEY: this_host(),
            },
            state_path,
        )
        return proc

    def _systemctl(self, *args: str) -> subprocess.CompletedProcess:
        if shutil.which("systemctl") is None:
            raise VLLMServerError("vllm_server mode 'systemd' needs systemctl, which is not on PATH here.")
        argv = ["systemctl", *(["--user"] if self.systemd_user else []), *args]
        return subprocess.run(argv, capture_output=True, text=True)

    @contextmanager
    def _serve_systemd(self, log) -> Iterator[list[str]]:
        if not self.systemd_unit:
            raise VLLMServerError("vllm_server mode 'systemd' needs systemd_unit (the unit that runs vLLM).")
        unit = self.systemd_unit
        was_active = self._systemctl("is-active", unit).stdout.strip() == "active"
        if not was_active:
            started = self._systemctl("start", unit)
            if started.returncode != 0:
                raise VLLMServerError(f"`systemctl start {unit}` failed: {started.stderr.strip()}")
        journal = ["journalctl", *(["--user"] if self.systemd_user else []), "-u", unit, "-f", "-n", "0", "-o", "cat"]
        follower = CommandFollower(journal, log.info) if shutil.which("journalctl") else None
        if follower is not None:
            follower.start()

        def alive() -> str | None:
            state = self._systemctl("is-active", unit).stdout.strip()
            if state in ("failed", "inactive"):
                return f"systemd unit {unit} is {state}; see `journalctl -u {unit}`."
            return None

        try:
            self._wait_ready(self._own_urls(), log, alive)
            yield self._own_urls()
        finally:
            # Only stop what this call started; a unit that was already up belongs to someone else.
            if not was_active and not self.keep_alive:
                log.info(f"vLLM server: systemctl stop {unit}")
                self._systemctl("stop", unit)
            if follower is not None:
                follower.stop()
