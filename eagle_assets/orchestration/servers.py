"""``eagle-assets servers``: the managed vLLM servers of a state folder, as lines of text (those another
host launched, where hosts share the folder, are listed as on that host and never checked or stopped)."""

from __future__ import annotations

import json
from pathlib import Path

from eagle_assets.orchestration.pool_watch import short_duration
from eagle_assets.resources.server_registry import ManagedServer, list_servers, stop_idle_servers, stop_server
from eagle_assets.resources.server_state import server_state_dir


def header(width: int) -> str:
    return f"{'SERVER':<{width}} {'PID':>8} {'FINGERPRINT':<16} {'USERS':>5} {'AGE':>7} {'IDLE':>7}  MODEL"


def server_line(server: ManagedServer, width: int) -> str:
    if not server.local:
        idle = "?"
    elif not server.alive:
        idle = "dead"
    elif server.idle_since is None:
        idle = "-"
    else:
        idle = short_duration(server.idle_s)
    users = "?" if server.users is None else server.users
    if not server.local:
        note = f" (on host {server.hostname}: not checked or stopped from here)"
    elif server.idle_stop_after_s:
        note = f" (stops when idle {short_duration(server.idle_stop_after_s)})"
    else:
        note = " (never idle-stopped)"
    return (
        f"{server.name:<{width}} {server.pid:>8} {server.fingerprint:<16} {users:>5} "
        f"{short_duration(server.age_s):>7} {idle:>7}  {server.model}{note}"
    )


def _look(state_dir: Path | None, stop: str | None, log) -> tuple[Path, list[str]]:
    """Stop ``stop`` if given and every server idle past its grace; what was stopped, as lines."""
    folder = server_state_dir(state_dir)
    lines = []
    if stop is not None and stop_server(folder, stop, log):
        lines.append(f"stopped {stop}")
    for server in stop_idle_servers(folder, log):
        lines.append(
            f"stopped {server.name}: idle {short_duration(server.idle_s)} > {short_duration(server.idle_stop_after_s)}"
        )
    return folder, lines


def servers_json(state_dir: Path | None, stop: str | None, log) -> list[str]:
    folder, _ = _look(state_dir, stop, log)
    return [json.dumps([server.as_dict() for server in list_servers(folder)], indent=2)]


def servers_report(state_dir: Path | None, stop: str | None, log) -> list[str]:
    """Stop ``stop`` if given, stop idle servers past their grace, and list the rest."""
    folder, lines = _look(state_dir, stop, log)
    servers = list_servers(folder)
    if not servers:
        return [*lines, f"no managed vLLM servers in {folder}"]
    width = max(len("SERVER"), *(len(server.name) for server in servers))
    return [*lines, header(width), *(server_line(server, width) for server in servers)]
