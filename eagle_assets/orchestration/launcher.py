"""A run launcher that lets Dagster's run monitoring see dead run workers.

Dagster's ``DefaultRunLauncher`` starts run workers through the code server but cannot tell whether
one is still alive, so with it a killed run stays ``STARTED`` and keeps its pool slots. This one is
the same launcher plus ``check_run_worker_health`` from the worker's host and pid (run tags, see
``runs.worker``): the monitoring daemon (``run_monitoring`` in ``deploy/dagster.yaml``) then marks a
run whose worker died ``FAILED`` and frees its slots (``free_slots_after_run_end_seconds``).

    run_launcher:
      module: eagle_assets.orchestration.launcher
      class: HostPidRunLauncher
"""

from __future__ import annotations

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus

from eagle_assets.orchestration.worker import HOST_TAG, check_worker, host_name


class HostPidRunLauncher(dg.DefaultRunLauncher):
    """``DefaultRunLauncher`` + worker health from host and pid."""

    def launch_run(self, context) -> None:
        # Local code servers start the worker on this host; its pid comes with Dagster's
        # "Started process for run" event, and the executor tags it once the run starts.
        self._instance.add_run_tags(context.dagster_run.run_id, {HOST_TAG: host_name()})
        super().launch_run(context)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        worker = check_worker(self._instance, run)
        if worker.state == "dead":
            return CheckRunHealthResult(WorkerStatus.FAILED, worker.describe())
        # Only a worker seen dead is a failure: another host's, or one not recorded yet (the run is
        # still starting), is left to whoever can see it.
        return CheckRunHealthResult(WorkerStatus.RUNNING, worker.describe())
