"""The managed vLLM servers this project started: list them, stop one, stop idle ones.

Each is known by the files it left in the state folder (``server_state``). A server is idle when no
user marker belongs to a live process; its idle time counts from the last heartbeat, or from its start
when that is later (a heartbeat left by an earlier server on the port). A kept-alive or orphaned server
(its last user was killed) idle for longer than its grace is stopped by the next run or command that
looks, so a crash never holds the GPUs overnight, while a run restarted within the grace attaches
instead of reloading the model.

A state folder may be shared by several machines (a storage root or home on NFS). Servers another
machine launched are listed, but never probed, stopped or forgotten from here: their pids and user
markers mean nothing on this host. A state file without a host name (written before they were
recorded, and named ``<bind host>-<port>``) is taken for this host's.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle_assets.resources.server_process import pid_is_vllm, stop_process_group
from eagle_assets.resources.server_state import (
    DEFAULT_IDLE_STOP_S,
    DEFAULT_STOP_GRACE_S,
    HOSTNAME_KEY,
    ServerFiles,
    last_seen,
    live_users,
    read_state,
    server_lock,
    this_host,
)


@dataclass
class ManagedServer:
    name: str  # "<machine>-<bind host>-<port>", the state files' stem
    port: int
    pid: int
    alive: bool | None  # None: on another host, not checked from here
    model: str
    fingerprint: str
    users: int | None  # None: on another host, not checked from here
    started_at: float
    idle_since: float | None  # None while a user is live
    idle_stop_after_s: float  # 0 = never stopped for idleness
    keep_alive: bool
    hostname: str  # the machine that launched it

    @property
    def local(self) -> bool:
        return self.hostname == this_host()

    @property
    def age_s(self) -> float:
        return time.time() - self.started_at

    @property
    def idle_s(self) -> float:
        return 0.0 if self.idle_since is None else max(time.time() - self.idle_since, 0.0)

    @property
    def expired(self) -> bool:
        return self.alive and self.idle_since is not None and 0 < self.idle_stop_after_s <= self.idle_s

    def as_dict(self) -> dict:
        return {**asdict(self), "age_s": round(self.age_s, 1), "idle_s": round(self.idle_s, 1)}


def state_files(state_dir: Path) -> list[Path]:
    return sorted(Path(state_dir).glob("*.json")) if Path(state_dir).is_dir() else []


def read_server(state_path: Path) -> ManagedServer | None:
    state = read_state(state_path)
    if state is None:
        return None
    argv = state.get("argv", [])
    model = argv[argv.index("--model") + 1] if "--model" in argv else "?"
    hostname = state.get(HOSTNAME_KEY) or this_host()
    users_dir = ServerFiles.at(state_path).users
    started_at = state.get("started_at", state_path.stat().st_mtime)
    if hostname == this_host():
        alive = pid_is_vllm(state["pid"])
        users = live_users(users_dir) if users_dir.is_dir() else 0  # (removes dead users' markers)
        # A heartbeat older than this server is an earlier server's on the same port: idle from the start.
        idle_since = None if users else max(last_seen(users_dir) or started_at, started_at)
    else:
        alive = users = idle_since = None
    return ManagedServer(
        name=state_path.stem,
        port=int(state_path.stem.rsplit("-", 1)[1]),
        pid=state["pid"],
        alive=alive,
        model=model,
        fingerprint=state.get("fingerprint", "?"),
        users=users,
        started_at=started_at,
        idle_since=idle_since,
        idle_stop_after_s=state.get("idle_stop_after_s", DEFAULT_IDLE_STOP_S),
        keep_alive=not state.get("stop_when_unused", True),
        hostname=hostname,
    )


def list_servers(state_dir: Path) -> list[ManagedServer]:
    return [server for path in state_files(state_dir) if (server := read_server(path)) is not None]


def stop_server(state_dir: Path, name: str, log, only_if_idle: bool = False) -> bool:
    """Stop the server ``name`` (as listed, or its port) and forget it; under its lock, so no
    ``serve()`` attaches meanwhile. ``only_if_idle``: leave it when a user appeared. True if stopped.
    A server of another host is refused (ValueError): its pid means nothing here."""
    state_path = _state_path(Path(state_dir), name)
    server = read_server(state_path)
    if server is not None and not server.local:
        raise ValueError(
            f"vLLM server {server.name} runs on host {server.hostname}, not on this one "
            f"({this_host()}); stop it there: `eagle-assets servers --stop {server.name}`"
        )
    with server_lock(state_path):
        server = read_server(state_path)
        if server is None:
            return False
        if only_if_idle and not server.expired:
            return False
        grace = json.loads(state_path.read_text()).get("stop_grace_s", DEFAULT_STOP_GRACE_S)
        if server.users:
            log.warning(f"vLLM server {server.name}: stopping it although {server.users} user(s) are live")
        stop_process_group(server.pid, grace, log)
        state_path.unlink(missing_ok=True)
        return True


def stop_idle_servers(state_dir: Path, log, keep: str | None = None) -> list[ManagedServer]:
    """Stop every server of this host idle for longer than its grace (except ``keep``, the caller's own),
    and forget those whose process is gone. Returns the servers stopped."""
    stopped = []
    for server in list_servers(state_dir):
        if server.name == keep or not server.local:
            continue
        if not server.alive:
            _forget_if_dead(Path(state_dir) / f"{server.name}.json")
        elif server.expired:
            log.info(
                f"vLLM server {server.name} (pid {server.pid}, {server.model}) has had no live user for "
                f"{server.idle_s:.0f}s (grace {server.idle_stop_after_s:g}s): stopping it"
            )
            if stop_server(state_dir, server.name, log, only_if_idle=True):
                stopped.append(server)
    return stopped


def _forget_if_dead(state_path: Path) -> None:
    """Drop the state file under the lock, if its server is still dead then: a ``serve()`` may have
    launched a new server on that port (and written its state) since the file was read."""
    with server_lock(state_path):
        server = read_server(state_path)
        if server is not None and server.local and not server.alive:
            state_path.unlink(missing_ok=True)


def _state_path(state_dir: Path, name: str) -> Path:
    if name.isdigit():  # a bare port: the one server on it
        matches = [p for p in state_files(state_dir) if p.stem.rsplit("-", 1)[1] == name]
        if len(matches) > 1:  # several hosts share the folder: this host's
            matches = [p for p in matches if (server := read_server(p)) is not None and server.local] or matches
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ValueError(f"several servers on port {name}: {[p.stem for p in matches]}; name one as listed")
    path = state_dir / f"{name}.json"
    if not path.exists():
        known = [p.stem for p in state_files(state_dir)]
        raise ValueError(f"no managed vLLM server {name!r} in {state_dir}; known: {known or 'none'}")
    return path
