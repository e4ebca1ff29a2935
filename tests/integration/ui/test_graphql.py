"""The real Dagster UI (`dagster dev`, as `make ui` starts it): load the asset graph, launch a run.

Driven through the webserver's GraphQL endpoint, the same API the UI's browser code uses.
"""

from __future__ import annotations

import time

from eagle_assets.core.layout import PIPELINE
from tests.helpers.dagster_ui import ASSET_GRAPH, graphql

RUN_TIMEOUT_S = 300

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
