"""Which process executes a run, on which host, and whether it is still alive.

Every run of this project records its worker as run tags — host name, pid and the process's start
time (so a pid the kernel has since reused is not mistaken for the worker) — set by the code
location's executor (``runs.executor``) in the run worker, by ``eagle-assets demo`` for its in-process
runs, and (host only) by the run launcher at launch. Dagster's own ``Started process for run (pid: N)``
engine event supplies the pid of a launched run until the executor has tagged it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

HOST_TAG = "eagle_assets/worker_host"
PID_TAG = "eagle_assets/worker_pid"
START_TAG = "eagle_assets/worker_start"
STARTED_PROCESS = "Started process for run (pid: "


def host_name() -> str:
    return socket.gethostname()


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int, start: str | None = None) -> bool:
    """Alive, not a zombie, and (when ``start`` is known) the same process, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return not Path("/proc/self").exists()  # no procfs: kill(0) is all there is
    return fields[0] != "Z" and (not start or fields[19] == start)


def worker_tags(pid: int | None = None) -> dict[str, str]:
    """Run tags naming this host and process (or ``pid``) as the run's worker."""
    pid = os.getpid() if pid is None else pid
    tags = {HOST_TAG: host_name(), PID_TAG: str(pid)}
    if (start := process_start(pid)) is not None:
        tags[START_TAG] = start
    return tags


@dataclass(frozen=True)
class WorkerCheck:
    """``state``: alive | dead | elsewhere (another host: cannot be checked here) | unknown (not recorded)."""

    state: str
    host: str | None = None
    pid: int | None = None

    def describe(self) -> str:
        where = f"pid {self.pid} on host {self.host}" if self.pid else f"host {self.host or '?'}"
        return {
            "alive": f"worker {where} is alive",
            "dead": f"worker {where} is gone (killed or crashed)",
            "elsewhere": f"worker {where} (another host: not checked from here)",
            "unknown": "no worker recorded for this run (not started by eagle-assets' executor or demo)",
        }[self.state]


def _launched_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid from Dagster's ``Started process for run (pid: N)`` engine event of a launched run."""
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        message = record.message or ""
        if message.startswith(STARTED_PROCESS):
            return int(message[len(STARTED_PROCESS) :].split(")")[0])
    return None


def check_worker(instance: dg.DagsterInstance, run: dg.DagsterRun) -> WorkerCheck:
    host = run.tags.get(HOST_TAG)
    if host is None:
        return WorkerCheck("unknown")
    if host != host_name():
        return WorkerCheck("elsewhere", host, int(run.tags[PID_TAG]) if PID_TAG in run.tags else None)
    pid = int(run.tags[PID_TAG]) if PID_TAG in run.tags else _launched_pid(instance, run.run_id)
    if pid is None:
        return WorkerCheck("unknown", host)
    alive = process_alive(pid, run.tags.get(START_TAG))
    return WorkerCheck("alive" if alive else "dead", host, pid)
