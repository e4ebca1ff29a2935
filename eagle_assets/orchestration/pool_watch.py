"""No silent waits on a concurrency pool.

Dagster logs ``Step blocked by limit for pool gpu`` once and then waits as long as the slot is held —
forever when its holder was killed. While this process runs steps, :class:`PoolWaitWatcher` looks at
the pools every few seconds: a step of this process's runs waiting longer than ``after_s`` gets a
log line naming the holder run and step, since when it holds the slot, whether its worker is alive
and how to free it; a holder whose worker on this host is gone is reconciled at once, which ends
the wait. In-process runs (``dg.materialize``) also stop on SIGTERM/Ctrl-C while waiting: Dagster
captures those signals during a run and only looks at them when a step starts, so a run blocked
on a pool never would; the watcher raises ``KeyboardInterrupt`` in the main thread instead, which
Dagster turns into a failed run with its pending claims released.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from datetime import datetime, timezone

import dagster as dg
from dagster._utils.interrupts import check_captured_interrupt

from eagle_assets.orchestration.reconcile import IN_PROGRESS, reconcile_dead_runs
from eagle_assets.orchestration.worker import HOST_TAG, PID_TAG, check_worker, host_name

# A wait on a pool longer than this (seconds) is reported, and again as often while it lasts.
REPORT_AFTER_ENV = "EAGLE_ASSETS_POOL_WAIT_REPORT_S"
DEFAULT_REPORT_AFTER_S = 60.0


def short_duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _step_started(instance: dg.DagsterInstance, run_id: str, step_key: str) -> float | None:
    starts = [
        r.timestamp for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START) if r.step_key == step_key
    ]
    return max(starts) if starts else None


def describe_holder(instance: dg.DagsterInstance, run_id: str, step_key: str) -> tuple[str, bool]:
    """A sentence about who holds a slot and how to free it; True when its worker is dead here."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return f"run {run_id} (deleted) step {step_key}; free it in the UI: Deployment → Concurrency", False
    worker = check_worker(instance, run)
    started = _step_started(instance, run_id, step_key)
    since = (
        (
            f" since {datetime.fromtimestamp(started, timezone.utc):%Y-%m-%d %H:%M:%S} UTC "
            f"({short_duration(time.time() - started)} ago)"
        )
        if started
        else ""
    )
    text = f"run {run_id} ({run.status.value}) step {step_key}{since}; {worker.describe()}"
    if worker.state == "dead":
        return text + ": freeing it now (marked FAILED)", True
    if worker.state == "alive":
        return (
            text + f". It is working: wait for it, or stop it (UI: Runs → {run_id[:8]} → Terminate; "
            f"or `kill {worker.pid}`, after which the next run frees the slot)"
        ), False
    return (
        text + f". If that worker is dead: UI Runs → {run_id[:8]} → Terminate (mark canceled), then "
        "Deployment → Concurrency → free its slot; a daemon with run monitoring does it for runs of "
        "eagle-assets"
    ), False


class PoolWaitWatcher:
    """``with PoolWaitWatcher(instance, log): <execute runs in this process>``."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        log,
        after_s: float | None = None,
        poll_s: float = 2.0,
        interrupt_main: bool = False,
    ):
        if after_s is None:
            after_s = float(os.environ.get(REPORT_AFTER_ENV, DEFAULT_REPORT_AFTER_S))
        self.instance, self.log, self.after_s, self.poll_s = instance, log, after_s, poll_s
        self.interrupt_main = interrupt_main
        self.interrupted = False
        self._reported: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pool-wait-watcher", daemon=True)

    def __enter__(self) -> PoolWaitWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _my_runs(self) -> set[str]:
        tags = {HOST_TAG: host_name(), PID_TAG: str(os.getpid())}
        return {
            r.dagster_run.run_id for r in self.instance.get_run_records(dg.RunsFilter(statuses=IN_PROGRESS, tags=tags))
        }

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # a monitoring hiccup (e.g. a locked database) must not end the run
                self.log.warning(f"pool wait watcher: {exc!r}")

    def check(self) -> None:
        storage = self.instance.event_log_storage
        if not storage.supports_global_concurrency_limits:
            return
        mine = self._my_runs()
        if not mine:
            return
        now = time.time()
        for pool in storage.get_concurrency_keys():
            info = storage.get_concurrency_info(pool)
            waiting = [p for p in info.pending_steps if p.run_id in mine and p.assigned_timestamp is None]
            if not waiting:
                continue
            if self.interrupt_main and check_captured_interrupt() and not self.interrupted:
                self.interrupted = True
                self.log.warning(f"interrupted while waiting for pool {pool!r}: stopping the run")
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(threading.main_thread().ident), ctypes.py_object(KeyboardInterrupt)
                )
                return
            for pending in waiting:
                waited = now - pending.enqueued_timestamp.timestamp()
                key = (pending.run_id, pending.step_key)
                if waited < self.after_s or now - self._reported.get(key, 0.0) < self.after_s:
                    continue
                self._reported[key] = now
                holders = [describe_holder(self.instance, s.run_id, s.step_key) for s in info.claimed_slots]
                self.log.warning(
                    f"step {pending.step_key} of run {pending.run_id} has waited {short_duration(waited)} "
                    "for a slot of "
                    f"pool {pool!r} (limit {info.slot_count}); held by: "
                    + ("; ".join(text for text, _ in holders) or "nobody (the next claim takes it)")
                )
                if any(dead for _, dead in holders):
                    reconcile_dead_runs(self.instance, self.log, by="the pool wait watcher")
