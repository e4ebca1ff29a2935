"""The one free-port picker of the test suite."""

from __future__ import annotations

import socket

# This project's share of local ports: vLLM servers (a speculating one takes the port after its base
# server's), `dagster dev`. Other sessions on the host pick from the same range and skip what is bound.
PORTS = range(8300, 8500)
_HANDED_OUT: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 1, ports: range = PORTS) -> int:
    """The first port of ``ports`` that starts ``span`` consecutive ports nothing on this host is bound to
    and that this test session has not handed out yet (a server picked for is often started later). The
    ports are reserved for the session, never handed out twice."""
    for port in ports:
        block = range(port, port + span)
        if block.stop <= ports.stop and not _HANDED_OUT & set(block) and all(map(_bindable, block)):
            _HANDED_OUT.update(block)
            return port
    raise RuntimeError(f"no {span} free consecutive port(s) in {ports.start}-{ports.stop - 1}")
