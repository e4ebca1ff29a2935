"""Operating-system pieces of running a server process: port probe, pid check, stop, log streaming."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

LOG_TAIL_LINES = 60
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


def port_in_use(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pid_is_vllm(pid: int) -> bool:
    """Whether ``pid`` is alive and (where /proc exists) still a vLLM API server, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            return VLLM_MODULE.encode() in cmdline.read_bytes()
        except OSError:
            return False
    return True


def read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))
    except OSError:
        return "(no server log)"


class LogFollower(threading.Thread):
    """Copies new lines of the server's log file into the Dagster log until stopped."""

    def __init__(self, path: Path, emit: Callable[[str], None], offset: int):
        super().__init__(name=f"vllm-log:{path.name}", daemon=True)
        self.path, self.emit, self.offset = path, emit, offset
        self._stop_event = threading.Event()

    def run(self) -> None:
        partial = ""
        with open(self.path, errors="replace") as fh:
            fh.seek(self.offset)
            while True:
                chunk = fh.readline()
                if chunk:
                    partial += chunk
                    if partial.endswith("\n"):
                        self.emit(f"[vllm] {partial.rstrip()}")
                        partial = ""
                elif self._stop_event.wait(0.25):
                    return

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():  # also safe when it never started
            self.join(timeout=5)


class CommandFollower(threading.Thread):
    """Copies a command's output lines (``journalctl -f``) into the Dagster log until stopped."""

    def __init__(self, argv: list[str], emit: Callable[[str], None]):
        super().__init__(name="vllm-journal", daemon=True)
        self.emit = emit
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(self) -> None:
        for line in self.proc.stdout:
            self.emit(f"[vllm] {line.rstrip()}")

    def stop(self) -> None:
        self.proc.terminate()
        self.join(timeout=5)


def stop_process_group(pid: int, grace_s: float, log, child: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group that ``pid`` leads; SIGKILL it after ``grace_s`` (leftover workers too).

    ``child`` is the ``Popen`` when this process started the server (then it is also reaped);
    otherwise the server is watched through its pid.
    """

    def gone() -> bool:
        return child.poll() is not None if child is not None else not pid_is_vllm(pid)

    if gone():
        return
    log.info(f"vLLM server: stopping pid {pid} (SIGTERM, SIGKILL after {grace_s:g}s)")
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not gone():
        log.warning(f"vLLM server: pid {pid} ignored SIGTERM for {grace_s:g}s, sending SIGKILL")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if child is not None:
        child.wait()
