"""The code location's executor: Dagster's default (multiprocess, or in-process by config), plus
what makes a crash harmless to the next run. In the run worker, before any step, it records the
worker (host, pid) as run tags — what run monitoring and reconciliation check — and reconciles the
instance (dead runs of this host failed, their slots freed); while steps run it watches pool waits."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from eagle_assets.orchestration.pool_watch import PoolWaitWatcher
from eagle_assets.orchestration.recovery import configured_state_dir, reconcile
from eagle_assets.orchestration.worker import worker_tags


class WorkerRecordingExecutor(dg.Executor):
    """Wraps another executor; see the module docstring."""

    def __init__(self, inner: dg.Executor):
        self.inner = inner

    @property
    def retries(self):
        return self.inner.retries

    @property
    def step_dependency_config(self):
        return self.inner.step_dependency_config

    def execute(self, plan_context, execution_plan) -> Iterator[dg.DagsterEvent]:
        instance = plan_context.instance
        instance.add_run_tags(plan_context.run_id, worker_tags())
        state_dir = configured_state_dir(plan_context.job.get_definition(), plan_context.run_config)
        reconcile(instance, plan_context.log, by=f"run {plan_context.run_id[:8]}", state_dir=state_dir)
        with PoolWaitWatcher(instance, plan_context.log):
            yield from self.inner.execute(plan_context, execution_plan)


_default = dg.multi_or_in_process_executor


def _create(init_context) -> dg.Executor:
    return WorkerRecordingExecutor(_default.executor_creation_fn(init_context))


recorded_executor = dg.ExecutorDefinition(
    name=_default.name,
    config_schema=_default.config_schema,
    requirements=_default.get_requirements,
    executor_creation_fn=_create,
    description="Dagster's multi_or_in_process executor that also records the run worker (host, pid) and "
    "reconciles runs killed on this host before stepping.",
)
