"""Crashes and restarts: run workers recorded by host and pid, dead runs reconciled (with or without
the Dagster daemon), no silent waits on the ``gpu`` pool, idle managed vLLM servers stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from eagle_assets.orchestration.pool_watch import PoolWaitWatcher
from eagle_assets.orchestration.reconcile import reconcile_dead_runs
from eagle_assets.orchestration.worker import worker_tags
from eagle_assets.resources.server_registry import stop_idle_servers
from eagle_assets.resources.server_state import server_state_dir

log = logging.getLogger("eagle_assets.orchestration.recovery")


def configured_state_dir(job: dg.JobDefinition, run_config: Mapping | None = None) -> Path:
    """The managed servers' state folder of a run of ``job``: its ``vllm_server`` resource's
    ``state_dir`` (the run config's over the resource's own, environment variables resolved), else
    the default one."""
    resources = dg.validate_run_config(job, run_config or {}).get("resources", {})
    config = (resources.get("vllm_server") or {}).get("config")
    return server_state_dir(config.get("state_dir") if isinstance(config, Mapping) else None)


def reconcile(
    instance: dg.DagsterInstance, logger=None, by: str = "eagle-assets", state_dir: Path | None = None
) -> list[str]:
    """What every command and run does first: fail dead runs of this host, free their slots, and stop
    managed vLLM servers idle past their grace (those of ``state_dir``, the default folder if None)."""
    logger = logger or log
    stop_idle_servers(server_state_dir(state_dir), logger)
    return reconcile_dead_runs(instance, logger, by=by)


@contextmanager
def in_process_runs(
    instance: dg.DagsterInstance, by: str, logger=None, state_dir: Path | None = None
) -> Iterator[dict[str, str]]:
    """Around a command's in-process ``dg.materialize`` calls: reconcile first (managed servers of
    ``state_dir``), watch pool waits (SIGTERM/Ctrl-C end a blocked wait), and yield the tags each run
    must carry (its worker)."""
    logger = logger or log
    reconcile(instance, logger, by=by, state_dir=state_dir)
    with PoolWaitWatcher(instance, logger, interrupt_main=True) as watcher:
        yield worker_tags()
    if watcher.interrupted:
        raise KeyboardInterrupt
