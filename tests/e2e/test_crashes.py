"""A crash never blocks the next run. Real runs — `dagster asset materialize`, `dagster-daemon`,
in-process `dg.materialize` — killed with SIGKILL on their whole process group (what the OOM killer
or a container restart does), then what happens next, with no manual step in between."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import index_file, prompts_file, samples_folder, sequences_file
from eagle_assets.core.shards import shard_paths
from tests.helpers.http import LocalServer, Reply, Request, relay
from tests.helpers.processes import kill_group
from tests.helpers.runs import (
    BIN,
    LOCATION,
    dagster_home,
    failure_message,
    gpu_holders,
    instance_at,
    materialize,
    samples_ok_rows,
    start,
    wait_until,
    write_run_config,
)

GRAPH = "prompts,reasoning_samples,token_sequences,hidden_states"


@pytest.mark.early
def test_sigkilled_materialize_during_samples_then_hidden_states_next_run_completes(
    tmp_path, vllm_server_urls, tiny_verifier
):
    home = dagster_home(tmp_path)
    root = tmp_path / "data"
    config = write_run_config(
        tmp_path / "run.yaml",
        {
            "resources": {
                "storage": {"config": {"root": str(root)}},
                "vllm_server": {"config": {"mode": "external", "base_urls": list(vllm_server_urls)}},
                "verifier": {"config": {"model_path": str(tiny_verifier), "device": "cpu", "batch_tokens": 256}},
            },
            "ops": {
                "prompts": {"config": {"limit": 48}},
                "reasoning_samples": {
                    "config": {
                        "max_tokens": 200,
                        "concurrency": 1,
                        "shard_rows": 4,
                        "flush_interval_s": 1.0,
                        "progress_interval_s": 1.0,
                    }
                },
            },
        },
    )
    tensors = root / "hidden_states" / "demo" / "tensors"
    instance = instance_at(home)

    # 1. Killed (whole process group) while reasoning_samples is answering prompts.
    first = materialize(home, config, GRAPH, tmp_path / "first.log")
    try:
        wait_until(
            lambda: len(shard_paths(samples_folder(root, "demo"))) >= 2,
            240,
            "the first sample shards",
            first,
            tmp_path / "first.log",
        )
    finally:
        kill_group(first)
    [killed_in_samples] = [r.run_id for r in instance.get_runs()]
    assert instance.get_run_by_id(killed_in_samples).status == dg.DagsterRunStatus.STARTED
    assert gpu_holders(instance) == [killed_in_samples]  # a held slot blocks every later gpu step
    wanted = pq.read_table(prompts_file(root, "demo"), columns=["prompt_id"])["prompt_id"].to_pylist()
    assert 0 < len(samples_ok_rows(samples_folder(root, "demo"))) < len(wanted), "the kill did not land mid-generation"

    # 2. The next run frees the slot by itself, finishes the samples, and is killed during hidden_states.
    second = materialize(home, config, GRAPH, tmp_path / "second.log")
    try:
        wait_until(
            lambda: len(list(tensors.glob("*.safetensors"))) >= 3 if tensors.exists() else 0,
            300,
            "the first hidden-state files",
            second,
            tmp_path / "second.log",
            poll_s=0.005,
        )
    finally:
        kill_group(second)
    second_id = instance.get_runs(limit=1)[0].run_id
    assert instance.get_run_by_id(killed_in_samples).status == dg.DagsterRunStatus.FAILURE
    reason = failure_message(instance, killed_in_samples)
    assert "is gone (killed or crashed)" in reason and f"run {second_id[:8]}" in reason, reason
    assert "reconciled the Dagster instance" in (tmp_path / "second.log").read_text()
    before = {p.name: p.stat().st_mtime_ns for p in tensors.glob("*.safetensors")}
    sequences = pq.read_table(sequences_file(root, "demo"), columns=["input_ids"])
    distinct = len({tuple(ids) for ids in sequences["input_ids"].to_pylist()})
    assert 0 < len(before) < distinct, "the kill did not land mid-extraction"

    # 3. A plain re-run completes: no manual step, nothing lost, nothing done twice.
    third = materialize(home, config, GRAPH, tmp_path / "third.log")
    assert third.wait(timeout=600) == 0, (tmp_path / "third.log").read_text()[-4000:]
    third_id = instance.get_runs(limit=1)[0].run_id
    assert instance.get_run_by_id(second_id).status == dg.DagsterRunStatus.FAILURE
    assert "is gone (killed or crashed)" in failure_message(instance, second_id)
    assert instance.get_run_by_id(third_id).status == dg.DagsterRunStatus.SUCCESS
    assert gpu_holders(instance) == []
    assert Counter(samples_ok_rows(samples_folder(root, "demo"))) == Counter(
        wanted
    )  # every prompt answered exactly once
    index = pq.read_table(index_file(root, "demo")).to_pylist()
    assert len(index) == sequences.num_rows
    for row in index:
        assert file_sha256(root / "hidden_states" / "demo" / row["file"]) == row["sha256"]
    assert {p.name: p.stat().st_mtime_ns for p in tensors.glob("*.safetensors") if p.name in before} == before
    assert not list(tensors.glob(".*.tmp"))


def _holder_config(tmp_path: Path, root: Path) -> Path:
    """A run whose reasoning_samples step holds the gpu slot while it waits for a server that is still
    loading (here: a port nothing listens on), the way it waits for Kimi-K2.5 for tens of minutes."""
    return write_run_config(
        tmp_path / "holder.yaml",
        {
            "resources": {
                "storage": {"config": {"root": str(root)}},
                "vllm_server": {
                    "config": {"mode": "external", "base_urls": ["http://127.0.0.1:9/v1"], "startup_timeout_s": 900}
                },
            },
            "ops": {"prompts": {"config": {"limit": 8}}},
        },
    )


@pytest.mark.early
def test_daemon_marks_a_killed_run_failed_and_frees_its_slot_without_any_command(tmp_path):
    home = dagster_home(tmp_path, poll_s=1, free_slots_s=1)
    instance = instance_at(home)
    daemon = start([str(BIN / "dagster-daemon"), "run", *LOCATION], home, tmp_path / "daemon.log")
    holder = materialize(
        home, _holder_config(tmp_path, tmp_path / "data"), "prompts,reasoning_samples", tmp_path / "holder.log"
    )
    try:
        run_id = wait_until(
            lambda: next(iter(gpu_holders(instance)), None),
            120,
            "the gpu slot claimed",
            holder,
            tmp_path / "holder.log",
        )
        time.sleep(3)  # the daemon has looked at the live run at least once and left it alone
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        kill_group(holder)
        wait_until(
            lambda: instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE,
            90,
            "the daemon to mark the killed run FAILED",
            daemon,
            tmp_path / "daemon.log",
            poll_s=0.5,
        )
        wait_until(
            lambda: not gpu_holders(instance),
            60,
            "the daemon to free the slot",
            daemon,
            tmp_path / "daemon.log",
            poll_s=0.5,
        )
    finally:
        kill_group(holder)
        kill_group(daemon, signal.SIGTERM, grace_s=30)
    assert "is gone (killed or crashed)" in failure_message(instance, run_id)


BLOCKED_DEMO_STEP = """
import sys, dagster as dg
from eagle_assets.definitions import build_definitions
from eagle_assets.resources import StorageRoot
from eagle_assets.orchestration.recovery import in_process_runs
defs = build_definitions({"storage": StorageRoot(root=sys.argv[1])})
with dg.DagsterInstance.get() as instance, in_process_runs(instance, by="test") as worker:
    dg.materialize([*defs.assets], selection=["hidden_states"], partition_key="demo", instance=instance,
                   resources=defs.resources, raise_on_error=False, tags=worker)
"""


@pytest.mark.early
def test_an_in_process_run_waiting_on_the_gpu_pool_says_who_holds_it_and_stops_on_sigterm(tmp_path):
    home = dagster_home(tmp_path)
    instance = instance_at(home)
    holder = materialize(
        home, _holder_config(tmp_path, tmp_path / "data"), "prompts,reasoning_samples", tmp_path / "holder.log"
    )
    waiter_log = tmp_path / "waiter.log"
    waiter = None
    try:
        holder_id = wait_until(
            lambda: next(iter(gpu_holders(instance)), None),
            120,
            "the gpu slot claimed",
            holder,
            tmp_path / "holder.log",
        )
        # The way `eagle-assets demo` runs: in this process, via dg.materialize.
        waiter = start(
            [sys.executable, "-c", BLOCKED_DEMO_STEP, str(tmp_path / "data")],
            home,
            waiter_log,
            EAGLE_ASSETS_POOL_WAIT_REPORT_S="3",
        )
        wait_until(lambda: "has waited" in waiter_log.read_text(), 120, "the wait to be reported", waiter, waiter_log)
        report = waiter_log.read_text()
        assert f"held by: run {holder_id} (STARTED) step reasoning_samples since" in report
        assert f"is alive. It is working: wait for it, or stop it (UI: Runs → {holder_id[:8]} → Terminate" in report
        started = time.monotonic()
        os.kill(waiter.pid, signal.SIGTERM)  # once: a wait that ignored it would hang here
        waiter.wait(timeout=60)
        assert time.monotonic() - started < 30
        assert waiter.returncode != 0
        [waiting_run] = [r for r in instance.get_runs() if r.run_id != holder_id]
        assert waiting_run.status == dg.DagsterRunStatus.FAILURE
        assert gpu_holders(instance) == [holder_id]
        pending = instance.event_log_storage.get_concurrency_info("gpu").pending_steps
        assert [p for p in pending if p.run_id == waiting_run.run_id] == []  # its claim was withdrawn
    finally:
        kill_group(holder)
        if waiter is not None:
            kill_group(waiter)


def answer_clock(upstream: str) -> tuple[LocalServer, list[float]]:
    """A real HTTP proxy in front of the server, and the times its answers went out (appended as each does)."""
    answered_at: list[float] = []

    def answer(request: Request) -> Reply:
        reply = relay(upstream, request)
        if request.method == "POST":
            return replace(reply, sent=lambda: answered_at.append(time.time()))
        return reply

    return LocalServer(answer), answered_at


FLUSHED_BY_TIME = """
import sys, dagster as dg
from eagle_assets.prompts import asset as prompts
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
parts = source_partitions()
dg.materialize(
    prompts.build(parts)["assets"] + reasoning_samples.build(parts)["assets"], partition_key="demo",
    resources={"storage": StorageRoot(root=sys.argv[1]),
               "vllm_server": VLLMServer(mode="external", base_urls=[sys.argv[2]]),
               "verifier": Verifier(model_path=sys.argv[3])},
    run_config={"ops": {"prompts": {"config": {"limit": 200}}, "reasoning_samples": {"config": {
        "max_tokens": 200, "concurrency": 4, "shard_rows": 100000, "flush_interval_s": %s,
        "progress_interval_s": 0.5}}}},
)
"""


FLUSH_INTERVAL_S = 2.0


@pytest.mark.early
def test_a_kill_regenerates_at_most_one_flush_interval_of_answered_rows(tmp_path, vllm_server_urls, tiny_verifier):
    clock, answered_at = answer_clock(vllm_server_urls[0])
    log = tmp_path / "run.log"
    # shard_rows is out of reach: every shard here is written because its first row got old.
    run = start(
        [
            sys.executable,
            "-c",
            FLUSHED_BY_TIME % FLUSH_INTERVAL_S,
            str(tmp_path / "data"),
            clock.url,
            str(tiny_verifier),
        ],
        tmp_path,
        log,
    )
    try:
        wait_until(
            lambda: len(shard_paths(samples_folder(tmp_path / "data", "demo"))) >= 3,
            240,
            "three time-flushed shards",
            run,
            log,
        )
        time.sleep(FLUSH_INTERVAL_S * 0.7)  # land somewhere inside the next interval
    finally:
        kill_group(run)
        killed_at = time.time()
        clock.close()
    on_disk = len(samples_ok_rows(samples_folder(tmp_path / "data", "demo")))
    answered = len(answered_at)
    lost = answered - on_disk  # answered before the kill, never written: regenerated by the next run
    # The buffer is written when its oldest row is FLUSH_INTERVAL_S old (checked on each new row and on
    # the 0.5 s ticker), in a writer thread; allow that tick and the write itself on a loaded machine.
    window = FLUSH_INTERVAL_S + 0.5 + 2.0  # a loaded 2-core host needs more than 1.0 s for that
    recent = sum(t >= killed_at - window for t in answered_at)
    assert 0 <= lost <= recent, f"{lost} answered rows lost, but only {recent} were answered in the last {window}s"
    assert lost < answered / 2, (lost, answered)


def test_a_sigkilled_demo_does_not_block_the_next_demo(demo):
    """A demo killed mid-run leaves its run STARTED, holding the gpu slot: the next demo (the session's,
    tests/e2e/conftest.py) marks it failed, frees the slot and reuses the killed demo's vLLM server, with
    no manual step in between."""
    from eagle_assets.resources.server_process import port_in_use

    home, port = demo.home, demo.port
    output = demo.output
    # The demo's terminal shows status and result lines; its full log file has the reconcile line.
    full_log = Path(re.search(r"^full log: (.+)$", output, flags=re.MULTILINE).group(1)).read_text()
    assert "reconciled the Dagster instance" in full_log and "1 dead run(s) marked FAILED" in full_log
    assert "vLLM server: attaching to running server" in full_log  # the killed demo's server, not a reload
    assert re.search(r"^acceptance_length=", output, flags=re.MULTILINE)
    instance = instance_at(home)
    killed = instance.get_runs()[-1]
    assert killed.status == dg.DagsterRunStatus.FAILURE and "is gone" in failure_message(instance, killed.run_id)
    assert not port_in_use("127.0.0.1", port)  # the second demo, its last user, stopped the server
