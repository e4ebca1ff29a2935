"""What a managed vLLM server leaves in the state folder, through which the runs of a host share it.

Per server, named ``<machine>-<bind host>-<port>`` so that hosts may share the folder (NFS):

* ``.json`` — its launch: pid, fingerprint, argv, log path, start time, whether the last user out stops
  it, its idle and stop graces, the machine's host name;
* ``.log`` — the server's output;
* ``.lock`` — held to check-then-launch, to leave and to stop, so that none of them races another;
* ``.users/`` — one marker per ``serve()`` using the server, named by its pid and touched by its
  heartbeat, and ``.last_seen``, whose mtime is when a user was last seen alive (a dead user's
  marker is removed, its last heartbeat kept there, so the idle time counts from its death).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.core.files import write_json
from eagle_assets.tiny_verifier.cache import default_cache_dir

DEFAULT_IDLE_STOP_S = 3600.0
DEFAULT_STOP_GRACE_S = 30.0
HOSTNAME_KEY = "hostname"  # the state file's record of the machine that launched the server
LAST_SEEN = ".last_seen"
HEARTBEAT_S = 30.0


def this_host() -> str:
    return socket.gethostname()


def default_state_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return default_cache_dir(environ) / "vllm-servers"


def server_state_dir(configured: str | Path | None) -> Path:
    """The managed servers' state folder: ``configured`` (``vllm_server.state_dir``), else the default."""
    return Path(configured) if configured else default_state_dir()


@dataclass(frozen=True)
class ServerFiles:
    """One managed server's files in the state folder."""

    state: Path
    log: Path
    lock: Path
    users: Path

    @classmethod
    def at(cls, state: Path) -> ServerFiles:
        return cls(state, state.with_suffix(".log"), state.with_suffix(".lock"), state.with_suffix(".users"))

    @classmethod
    def on_this_host(cls, state_dir: Path, bind_host: str, port: int) -> ServerFiles:
        """The files of the server this machine runs on ``bind_host:port`` (the folder is created)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        # The machine first: hosts sharing the folder (NFS) keep their own state, users and lock.
        return cls.at(state_dir / f"{this_host()}-{bind_host or 'all'}-{port}.json")


def read_state(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record_launch(
    files: ServerFiles,
    pid: int,
    fingerprint: str,
    argv: list[str],
    keep_alive: bool,
    idle_stop_after_s: float,
    stop_grace_s: float,
) -> None:
    write_json(
        {
            "pid": pid,
            "fingerprint": fingerprint,
            "argv": argv,
            "log": str(files.log),
            "started_at": time.time(),
            "stop_when_unused": not keep_alive,
            "idle_stop_after_s": idle_stop_after_s,
            "stop_grace_s": stop_grace_s,
            HOSTNAME_KEY: this_host(),
        },
        files.state,
    )


@contextmanager
def server_lock(state_path: Path) -> Iterator[None]:
    """The server's lock, held to check-then-launch, to leave and to stop."""
    with open(state_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def register_user(users_dir: Path) -> Path:
    """Mark this process as using the server (one file per ``serve()``), so it is not stopped under it."""
    users_dir.mkdir(parents=True, exist_ok=True)
    marker = users_dir / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    marker.touch()
    return marker


def note_last_seen(users_dir: Path, when: float | None = None) -> None:
    """Move the server's last-seen time forward to ``when`` (default now); never backwards."""
    when = time.time() if when is None else when
    path = users_dir / LAST_SEEN
    try:
        if path.stat().st_mtime >= when:
            return
    except FileNotFoundError:
        path.touch()
    os.utime(path, (when, when))


def last_seen(users_dir: Path) -> float | None:
    """When a user was last seen alive: the newest heartbeat among the markers and ``.last_seen``."""
    times = [p.stat().st_mtime for p in users_dir.glob("*") if p.is_file()] if users_dir.is_dir() else []
    return max(times) if times else None


def live_users(users_dir: Path) -> int:
    """How many ``serve()`` calls still use the server; markers of dead processes are removed (their
    last heartbeat is kept in ``.last_seen``, so the idle time counts from the user's death)."""
    live = 0
    for marker in users_dir.glob("*-*"):
        try:
            os.kill(int(marker.name.split("-")[0]), 0)
            live += 1
        except (ProcessLookupError, ValueError):
            try:
                note_last_seen(users_dir, marker.stat().st_mtime)
            except FileNotFoundError:
                continue
            marker.unlink(missing_ok=True)
        except PermissionError:
            live += 1
    return live


class Heartbeat(threading.Thread):
    """Touches a user marker every ``interval_s`` while the user lives (a killed user stops touching it)."""

    def __init__(self, marker: Path, interval_s: float = HEARTBEAT_S):
        super().__init__(name=f"vllm-user:{marker.name}", daemon=True)
        self.marker, self.interval_s = marker, interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                os.utime(self.marker)
            except FileNotFoundError:
                return

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():  # also safe when it never started
            self.join(timeout=5)
