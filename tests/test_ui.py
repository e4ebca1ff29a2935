"""The real Dagster UI (`dagster dev`, as `make ui` starts it): load the asset graph, launch a run.

Driven through the webserver's GraphQL endpoint, the same API the UI's browser code uses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from eagle_assets.assets.group import PIPELINE

REPO = Path(__file__).resolve().parent.parent
PORTS = range(3100, 3110)  # this project's share of local ports
START_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300

ASSET_GRAPH = """
{ assetNodes { assetKey { path } groupName partitionKeys } }
"""

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}
"""

MATERIALIZATIONS = """
{ assetOrError(assetKey: {path: ["prompts"]}) { ... on Asset {
    assetMaterializations(partitions: ["demo"]) {
      runId
      metadataEntries { label ... on IntMetadataEntry { intValue } }
    } } } }
"""

RUN_STATUS = """
query Status($runId: ID!) { runOrError(runId: $runId) { ... on Run { status } } }
"""


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory):
    """``dagster dev`` on 127.0.0.1 with a throwaway DAGSTER_HOME and storage root; yields its URL."""
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EAGLE_ASSETS_DATA": str(tmp_path_factory.mktemp("data")),
    }
    port = free_port()
    log = open(home / "dagster_dev.log", "w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster")), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"dagster dev exited: {(home / 'dagster_dev.log').read_text()[-3000:]}"
            try:
                if graphql(url, ASSET_GRAPH)["assetNodes"]:
                    break
            except (httpx.HTTPError, KeyError, AssertionError):
                pass
            assert time.monotonic() < deadline, "dagster dev did not serve the asset graph in time"
            time.sleep(2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group: webserver, daemon, code server
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    response = httpx.post(url, json={"query": query, "variables": variables or {}}, timeout=60)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


@pytest.mark.integration
def test_ui_shows_the_asset_graph_and_runs_prompts_for_the_demo_partition(dagster_ui):
    from eagle_assets.definitions import build_definitions

    nodes = {tuple(n["assetKey"]["path"]): n for n in graphql(dagster_ui, ASSET_GRAPH)["assetNodes"]}
    # Every asset of the code location is in the UI's graph (it grows as families join).
    assert {tuple(k.path) for k in build_definitions().resolve_asset_graph().get_all_asset_keys()} <= set(nodes)
    prompts = nodes[("prompts",)]
    assert prompts["groupName"] == PIPELINE
    assert {"demo", "jsonl", "parquet", "open_perfectblend"} <= set(prompts["partitionKeys"])

    params = {
        "selector": {
            "repositoryLocationName": "eagle_assets",
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": ["prompts"]}],
        },
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "demo"}]},
        "runConfigData": {"ops": {"prompts": {"config": {"limit": 100}}}},
    }
    launched = graphql(dagster_ui, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    deadline = time.monotonic() + RUN_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        status = graphql(dagster_ui, RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
        if status in {"SUCCESS", "FAILURE", "CANCELED"}:
            break
        time.sleep(2)
    assert status == "SUCCESS"
    [mat] = graphql(dagster_ui, MATERIALIZATIONS)["assetOrError"]["assetMaterializations"]
    assert mat["runId"] == run_id
    metadata = {e["label"]: e.get("intValue") for e in mat["metadataEntries"]}
    assert metadata["rows_kept"] == 100
