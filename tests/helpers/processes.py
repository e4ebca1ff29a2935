"""Child processes of the tests: the one kill helper, and processes that pass for a vLLM server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eagle_assets.resources.server_process import VLLM_MODULE, pid_is_vllm
from eagle_assets.resources.server_state import HOSTNAME_KEY


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, grace_s: float | None = None) -> None:
    """``sig`` (SIGKILL: what the OOM killer or a container restart does) to ``proc``'s whole process group
    when it leads one of its own (``start_new_session=True``), else to ``proc`` alone (never to this test
    process's group); then wait for ``proc``. With ``grace_s``, the group gets SIGKILL if ``proc`` is still
    running that long after ``sig``. A process that ended already is only waited for."""
    try:
        shares_our_group = os.getpgid(proc.pid) == os.getpgrp()
    except ProcessLookupError:  # the leader is gone; its group may live on
        shares_our_group = False
    try:
        if shares_our_group:
            if proc.poll() is None:
                os.kill(proc.pid, sig)
        else:
            os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    if grace_s is not None and sig != signal.SIGKILL:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
    proc.wait()


def with_default_signals(argv: list[str]) -> list[str]:
    """``argv`` run with SIGINT and SIGTERM at their defaults. A child inherits the signals its parent
    ignores: a test run started in the background ignores SIGINT, and Dagster maps SIGTERM to SIGINT's
    handler, so `dagster dev` would outlive the SIGTERM that stops it."""
    reset = (
        "import os, signal, sys\n"
        "for name in ('SIGINT', 'SIGTERM', 'SIGPIPE', 'SIGXFSZ'):\n"
        "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", reset, *argv]


# A process that pid_is_vllm takes for a vLLM server (its argv names the module); it serves nothing.
FAKE_VLLM = [sys.executable, "-c", "import time; time.sleep(120)", VLLM_MODULE]


def fake_vllm() -> subprocess.Popen:
    """A process that looks like a vLLM API server; returned once its command line says so (right after
    Popen, /proc may still show the parent's, before the exec)."""
    proc = subprocess.Popen(FAKE_VLLM, start_new_session=True)
    deadline = time.monotonic() + 10
    while not pid_is_vllm(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def dead_pid() -> int:
    """The pid of a fake vLLM server that has been killed and reaped."""
    proc = fake_vllm()
    kill_group(proc)
    return proc.pid


def write_state(state_dir: Path, name: str, pid: int, hostname: str | None, **fields) -> Path:
    """A state file as a launch leaves it, idle past its grace (so this host's would be stopped)."""
    state = {
        "pid": pid,
        "fingerprint": "f" * 16,
        "argv": ["python", "--model", "/models/m"],
        "started_at": time.time() - 600,
        "idle_stop_after_s": 1,
        "stop_grace_s": 1,
        **fields,
    }
    if hostname is not None:
        state[HOSTNAME_KEY] = hostname
    path = state_dir / f"{name}.json"
    path.write_text(json.dumps(state))
    return path
