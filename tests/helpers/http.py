"""The one local HTTP server of the test suite: real sockets on 127.0.0.1, each reply decided by a function.

Canned answers (``/server_info``), scripted ones (a vLLM-like API whose answers time out), and proxies
in front of the session's vLLM server (``relay``) that inject faults, die, or note when an answer went
out are all this server with another ``answer`` function.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    # Called once the reply is written (e.g. to note when an answer went out).
    sent: Callable[[], None] | None = None

    @classmethod
    def of_json(cls, value: Any, status: int = 200) -> Reply:
        return cls(status, json.dumps(value).encode())


class LocalServer:
    """An HTTP server on 127.0.0.1 (a port the OS picks) answering each request with ``answer(request)``,
    in threads of its own; ``answer`` returning None sends nothing (the connection just closes, as from a
    server that never answered). A context manager: closed on exit."""

    def __init__(self, answer: Callable[[Request], Reply | None]):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = answer(Request(self.command, self.path, dict(self.headers), body))
                if reply is None:
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    return
                if reply.sent is not None:
                    reply.sent()

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._closed = threading.Event()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = f"{self.base_url}/v1"  # where an OpenAI-style client is pointed
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop listening (callable from inside ``answer``: the serving loop runs in its own thread)."""
        if not self._closed.is_set():
            self._closed.set()
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def relay(upstream: str, request: Request, timeout_s: float = 300) -> Reply:
    """``request`` forwarded to the server at ``upstream`` (a base URL: ``/v1`` is dropped); its answer."""
    response = httpx.request(
        request.method,
        upstream.removesuffix("/v1") + request.path,
        content=request.body or None,
        headers={"content-type": "application/json"},
        timeout=timeout_s,
    )
    return Reply(response.status_code, response.content, response.headers.get("content-type", "application/json"))
