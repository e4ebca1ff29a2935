"""Bringing a vLLM server up for a ``serve()`` call and leaving it: managed, systemd, readiness.

A managed server is shared by the ``serve()`` calls of its host and port: a live server whose launch
fingerprint matches is attached to instead of starting a second one (one that does not match is
refused), each call registers as a user, and the last user out, not the launcher, stops it unless
its launch asked to keep it alive. Check-then-launch and leaving hold the server's lock, so two steps
starting together launch one server. The files this relies on are ``server_state``'s; servers left
idle past their grace are stopped (``server_registry``) before each launch.

Readiness is ``/health`` and ``/v1/models`` answering 200, waited for up to the startup timeout
(large models load for tens of minutes) while checking that the server is still alive.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from eagle_assets.resources.server_process import (
    CommandFollower,
    LogFollower,
    pid_is_vllm,
    port_in_use,
    read_tail,
    stop_process_group,
)
from eagle_assets.resources.server_registry import stop_idle_servers
from eagle_assets.resources.server_state import (
    Heartbeat,
    ServerFiles,
    live_users,
    note_last_seen,
    read_state,
    record_launch,
    register_user,
    server_lock,
)


class VLLMServerError(RuntimeError):
    """The server could not be started, attached to, or reached; the message says why and what to do."""


def launch_fingerprint(argv: list[str], env: dict[str, str], api_key: str | None) -> str:
    """Identity of a launch: argv, added env and (a hash of) the API key; attaching needs the same."""
    ident = {
        "argv": argv[1:],  # the interpreter path may differ between equivalent venvs
        "env": dict(sorted(env.items())),
        "api_key_sha256": hashlib.sha256(api_key.encode()).hexdigest() if api_key else None,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def client_host(bind_host: str) -> str:
    """Where this machine reaches a server bound to ``bind_host``."""
    return "127.0.0.1" if bind_host in ("", "0.0.0.0", "::") else bind_host


def server_urls(bind_host: str, port: int) -> list[str]:
    return [f"http://{client_host(bind_host)}:{port}/v1"]


@dataclass(frozen=True)
class ManagedLaunch:
    """A managed server as the resource describes it: what runs, where, and how it is shared and stopped."""

    argv: list[str]
    env: dict[str, str]  # added to the server's environment; the API key is handed over apart
    fingerprint: str
    api_key: str | None
    bind_host: str
    port: int
    state_dir: Path
    startup_timeout_s: float
    stop_grace_s: float
    keep_alive: bool
    idle_stop_after_s: float


def wait_ready(urls: list[str], log, alive: Callable[[], str | None], *, api_key: str | None, timeout_s: float) -> None:
    """Poll ``/health`` and ``/v1/models`` of every URL until all answer 200.

    ``alive`` returns a reason when the server is known to be gone: then fail at once.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout_s
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
                    f"vLLM server not ready after {timeout_s:g}s ({last_problem}). "
                    "Check the server (its log), the base URL/port, or raise startup_timeout_s."
                )
            if now - last_note >= 30:
                log.info(f"vLLM server: waiting for readiness ({now - started:.0f}s; {last_problem})")
                last_note = now
            time.sleep(1.0)
    log.info(f"vLLM server: ready at {urls} after {time.monotonic() - started:.1f}s")


@dataclass(frozen=True)
class RunningServer:
    """A ready managed server: its URLs, and ``exited(when)``: why it is gone (port, pid, exit code when
    this process started it, its log's tail), or None while it runs."""

    urls: list[str]
    exited: Callable[[str], str | None]


@contextmanager
def serve_managed(launch: ManagedLaunch, log) -> Iterator[list[str]]:
    """Attach to this host's server on the port or launch it; yield its URLs once ready; then leave."""
    with run_managed(launch, log) as server:
        yield server.urls


@contextmanager
def run_managed(launch: ManagedLaunch, log) -> Iterator[RunningServer]:
    """:func:`serve_managed`, yielding the :class:`RunningServer` for a caller that watches it while it works."""
    files = ServerFiles.on_this_host(launch.state_dir, launch.bind_host, launch.port)
    stop_idle_servers(files.state.parent, log, keep=files.state.stem)
    with server_lock(files.state):
        state = read_state(files.state)
        if state and pid_is_vllm(state["pid"]):
            if state["fingerprint"] != launch.fingerprint:
                raise VLLMServerError(
                    f"port {launch.port} belongs to a vLLM server started with a different configuration "
                    f"(pid {state['pid']}, fingerprint {state['fingerprint']} != {launch.fingerprint}; "
                    f"its argv is in {files.state}). Stop it or choose another port."
                )
            proc = None
            offset = files.log.stat().st_size if files.log.exists() else 0
            log.info(f"vLLM server: attaching to running server pid {state['pid']} (fingerprint {launch.fingerprint})")
        else:
            if port_in_use(client_host(launch.bind_host), launch.port):
                raise VLLMServerError(
                    f"port {launch.port} on {client_host(launch.bind_host)} is already in use by another process "
                    "(not a vLLM server started by eagle-assets). Choose a free port (vllm_server.port) "
                    "or stop that process."
                )
            proc, offset = start_server(launch, files, log), 0
            state = {"pid": proc.pid}
        me = register_user(files.users)
    heartbeat = Heartbeat(me)
    follower = LogFollower(files.log, log.info, offset)
    pid = state["pid"]
    urls = server_urls(launch.bind_host, launch.port)

    def exited(when: str = "") -> str | None:
        dead = proc.poll() is not None if proc is not None else not pid_is_vllm(pid)
        if not dead:
            return None
        code = f" with exit code {proc.returncode}" if proc is not None else ""
        return (
            f"the vLLM server on port {launch.port} (pid {pid}) exited{code}{when}. Last lines of {files.log}:\n"
            f"{read_tail(files.log)}"
        )

    try:
        # Started inside the try: whatever fails from here on, the user leaves (marker, heartbeat).
        heartbeat.start()
        files.log.touch()  # an attached server's log may have been cleaned away
        follower.start()
        wait_ready(
            urls,
            log,
            lambda: exited(" before it was ready"),
            api_key=launch.api_key,
            timeout_s=launch.startup_timeout_s,
        )
        yield RunningServer(urls, exited)
    finally:
        follower.stop()
        heartbeat.stop()
        _leave(launch, files, me, pid, proc, log)


def start_server(launch: ManagedLaunch, files: ServerFiles, log) -> subprocess.Popen:
    """Launch the server (its output into ``files.log``) and record the launch in ``files.state``."""
    env = {**os.environ, **launch.env}
    if launch.api_key:
        env["VLLM_API_KEY"] = launch.api_key  # vLLM reads it; argv (visible in ps) never holds it
    # Values are not logged: extra env may hold secrets too.
    log.info(f"vLLM server: starting {launch.argv} with extra env keys {sorted(launch.env)}; log: {files.log}")
    with open(files.log, "w") as log_file:
        # Own session: the server's worker processes are stopped with it, as one process group.
        proc = subprocess.Popen(
            launch.argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    record_launch(
        files,
        proc.pid,
        launch.fingerprint,
        launch.argv,
        keep_alive=launch.keep_alive,
        idle_stop_after_s=launch.idle_stop_after_s,
        stop_grace_s=launch.stop_grace_s,
    )
    return proc


def _leave(launch: ManagedLaunch, files: ServerFiles, me: Path, pid: int, proc: subprocess.Popen | None, log) -> None:
    """The last user out stops the server, unless its launch asked to keep it alive.

    Steps of one run may share a server (the second attaches while the first still works): the
    launcher must not stop it under them, so stopping waits for the last one.
    """
    with server_lock(files.state):
        me.unlink(missing_ok=True)
        note_last_seen(files.users)
        others = live_users(files.users)
        state = read_state(files.state) or {}
        if others:
            log.info(f"vLLM server: pid {pid} is still used by {others} other step(s); the last one stops it")
        elif state.get("stop_when_unused", True):
            stop_process_group(pid, launch.stop_grace_s, log, child=proc)
            files.state.unlink(missing_ok=True)
        else:
            log.info(f"vLLM server: keep_alive, leaving pid {pid} running on port {launch.port}")


def _systemctl(user: bool, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("systemctl") is None:
        raise VLLMServerError("vllm_server mode 'systemd' needs systemctl, which is not on PATH here.")
    argv = ["systemctl", *(["--user"] if user else []), *args]
    return subprocess.run(argv, capture_output=True, text=True)


@contextmanager
def serve_systemd(
    unit: str, *, user: bool, urls: list[str], keep_alive: bool, api_key: str | None, timeout_s: float, log
) -> Iterator[list[str]]:
    """Start ``unit`` unless it is active, yield ``urls`` once ready, and stop it if this call started it."""
    was_active = _systemctl(user, "is-active", unit).stdout.strip() == "active"
    if not was_active:
        started = _systemctl(user, "start", unit)
        if started.returncode != 0:
            raise VLLMServerError(f"`systemctl start {unit}` failed: {started.stderr.strip()}")
    journal = ["journalctl", *(["--user"] if user else []), "-u", unit, "-f", "-n", "0", "-o", "cat"]
    follower = CommandFollower(journal, log.info) if shutil.which("journalctl") else None
    if follower is not None:
        follower.start()

    def alive() -> str | None:
        state = _systemctl(user, "is-active", unit).stdout.strip()
        if state in ("failed", "inactive"):
            return f"systemd unit {unit} is {state}; see `journalctl -u {unit}`."
        return None

    try:
        wait_ready(urls, log, alive, api_key=api_key, timeout_s=timeout_s)
        yield urls
    finally:
        # Only stop what this call started; a unit that was already up belongs to someone else.
        if not was_active and not keep_alive:
            log.info(f"vLLM server: systemctl stop {unit}")
            _systemctl(user, "stop", unit)
        if follower is not None:
            follower.stop()
