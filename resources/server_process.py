"""Operating-system pieces of running a server process: port probe, pid check, stop, log streaming."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
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



def stop_process_group(proc: subprocess.Popen, grace_s: float, log) -> None:
    """SIGTERM the process group ``proc`` leads; SIGKILL it after ``grace_s`` (also any leftover workers)."""
    if proc.poll() is not None:
        return
    log.info(f"vLLM server: stopping pid {proc.pid} (SIGTERM, SIGKILL after {grace_s:g}s)")
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning(f"vLLM server: pid {proc.pid} ignored SIGTERM for {grace_s:g}s, sending SIGKILL")
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # also reaps worker processes left in the group
    except ProcessLookupError:
        pass
    proc.wait()
