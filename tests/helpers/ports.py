"""The one free-port picker of the test suite."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import tempfile
from pathlib import Path

from eagle_assets.orchestration.worker import process_alive

# This project's share of local ports: vLLM servers (a speculating one takes the port after its base
# server's), `dagster dev`.
PORTS = range(8300, 8500)
# A port handed out is claimed for this process by a file named after it: test sessions running at the same
# time on one host (a server picked for is often started later) never get the same port.
CLAIMS = Path(tempfile.gettempdir()) / "eagle-assets-test-ports"


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _claim(port: int) -> bool:
    """Claim ``port`` for this process, unless a live process holds it (a dead one's claim is taken over)."""
    path = CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = int(path.read_text() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and process_alive(holder):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with os.fdopen(fd, "w") as claim:
            claim.write(str(os.getpid()))
        atexit.register(lambda: path.unlink(missing_ok=True))
        return True
    return False


def free_port(span: int = 1, ports: range = PORTS) -> int:
    """The first port of ``ports`` that starts ``span`` consecutive ports nothing on this host is bound to
    and no test session holds; claimed for this session until it exits, never handed out twice."""
    CLAIMS.mkdir(exist_ok=True)
    for port in ports:
        block = range(port, port + span)
        if block.stop > ports.stop or not all(map(_bindable, block)):
            continue
        claimed = []
        for p in block:
            if not _claim(p):
                break
            claimed.append(p)
        if len(claimed) == span:
            return port
        for p in claimed:
            (CLAIMS / str(p)).unlink(missing_ok=True)
    raise RuntimeError(f"no {span} free consecutive port(s) in {ports.start}-{ports.stop - 1}")
