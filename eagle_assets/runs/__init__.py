"""Crashes and restarts: run workers recorded by host and pid, dead runs reconciled (with or without
the Dagster daemon), no silent waits on the ``gpu`` pool, idle managed vLLM servers stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from eagle_assets.resources.server_registry import stop_idle_servers
from eagle_assets.resources.vllm_server import default_state_dir
from eagle_assets.runs.pool_watch import PoolWaitWatcher
from eagle_assets.runs.reconcile import reconcile_dead_runs
from eagle_assets.runs.worker import worker_tags

log = logging.getLogger("eagle_assets.runs")


def reconcile(instance: dg.DagsterInstance, logger=None, by: str = "eagle-assets") -> list[str]:
    """What every command and run does first: fail dead runs of this host, free their slots, and stop
    managed vLLM servers idle past their grace."""
    logger = logger or log
    stop_idle_servers(default_state_dir(), logger)
    return reconcile_dead_runs(instance, logger, by=by)


@contextmanager
def in_process_runs(instance: dg.DagsterInstance, by: str, logger=None) -> Iterator[dict[str, str]]:
    """Around a command's in-process ``dg.materialize`` calls: reconcile first, watch pool waits
    (SIGTERM/Ctrl-C end a blocked wait), and yield the tags each run must carry (its worker)."""
    logger = logger or log
    reconcile(instance, logger, by=by)
    with PoolWaitWatcher(instance, logger, interrupt_main=True) as watcher:
        yield worker_tags()
    if watcher.interrupted:
        raise KeyboardInterrupt
