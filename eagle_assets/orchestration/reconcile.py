"""Reconcile the Dagster instance with the processes of this host: a run whose worker was killed
(SIGKILL, the OOM killer, a reboot) stays ``STARTED`` and keeps its concurrency slots forever unless
someone notices. Here runs ``STARTED`` on this host whose worker is gone are reported failed — the
reason in their event log — and every slot held by a finished run of this host is freed. Runs of
other hosts are never touched (their pids mean nothing here)."""

from __future__ import annotations

import logging

import dagster as dg

from eagle_assets.orchestration.worker import HOST_TAG, check_worker, host_name

_log = logging.getLogger("eagle_assets.orchestration.recovery")
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def held_slots(instance: dg.DagsterInstance) -> dict[str, list[tuple[str, str]]]:
    """run id -> [(pool, step key)] of every claimed concurrency slot."""
    storage = instance.event_log_storage
    held: dict[str, list[tuple[str, str]]] = {}
    if not storage.supports_global_concurrency_limits:
        return held
    for pool in storage.get_concurrency_keys():
        for slot in storage.get_concurrency_info(pool).claimed_slots:
            held.setdefault(slot.run_id, []).append((pool, slot.step_key))
    return held


def fail_dead_run(instance: dg.DagsterInstance, run: dg.DagsterRun, reason: str) -> None:
    """Report ``run`` failed with ``reason`` (unless it finished meanwhile) and free its slots."""
    current = instance.get_run_by_id(run.run_id)
    if current is not None and not current.is_finished:
        instance.report_run_failed(current, reason)
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def reconcile_dead_runs(instance: dg.DagsterInstance, log=None, by: str = "eagle-assets") -> list[str]:
    """Fail the dead runs of this host and free their slots; one log line when anything changed.

    Returns the ids of the runs reported failed.
    """
    log = log or _log
    host = host_name()
    held = held_slots(instance)
    failed, notes, freed = [], [], 0
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_PROGRESS, tags={HOST_TAG: host})):
        run = record.dagster_run
        worker = check_worker(instance, run)
        if worker.state != "dead":
            continue
        reason = (
            f"Run worker pid {worker.pid} on host {host} is gone (killed or crashed) while the run was "
            f"{run.status.value}; marked FAILED and its concurrency slots freed by {by}. Materialize "
            "again to resume: finished work is kept."
        )
        fail_dead_run(instance, run, reason)
        failed.append(run.run_id)
        slots = held.pop(run.run_id, [])
        freed += len(slots)
        notes.append(
            f"run {run.run_id[:8]} (worker pid {worker.pid}"
            + (f", held {', '.join(f'{pool}:{step}' for pool, step in slots)})" if slots else ")")
        )
    # Slots of finished runs: a run marked failed elsewhere (e.g. by hand in the UI) still holds them.
    for run_id, slots in held.items():
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished and run.tags.get(HOST_TAG) == host:
            instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            freed += len(slots)
            notes.append(f"finished run {run_id[:8]} still held {', '.join(f'{p}:{s}' for p, s in slots)}")
    if notes:
        log.warning(
            f"reconciled the Dagster instance on {host}: {len(failed)} dead run(s) marked FAILED, "
            f"{freed} concurrency slot(s) freed — {'; '.join(notes)}"
        )
    return failed
