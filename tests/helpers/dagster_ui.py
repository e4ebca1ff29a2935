"""The real Dagster UI (`dagster dev -w workspace.yaml`, as `make ui` starts it) over an instance of a test's
choosing: ``serve_ui`` yields its base URL once it serves the asset graph; ``graphql`` queries it.

tests/conftest.py's ``dagster_ui`` fixture starts one per test run for every UI test that brings no
instance of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers.ports import free_port
from tests.helpers.processes import kill_group, with_default_signals

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 300
ASSET_GRAPH = """
{ assetNodes { assetKey { path } groupName partitionKeys } }
"""


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    """``query`` against the webserver at ``url``; its ``data``, asserting there were no errors."""
    response = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


@contextmanager
def serve_ui(home: Path, data_root: Path) -> Iterator[str]:
    """``dagster dev`` on 127.0.0.1 over the instance in ``home`` (DAGSTER_HOME) and the storage root
    ``data_root``; yields its base URL once it serves the asset graph, and stops it after."""
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "EAGLE_ASSETS_DATA": str(data_root)}
    port = free_port()
    with open(home / "dagster_dev.log", "w") as log:
        dagster = str(Path(sys.executable).with_name("dagster"))
        proc = subprocess.Popen(
            with_default_signals([dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
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
            kill_group(proc, signal.SIGTERM, grace_s=60)  # the whole group: webserver, daemon, code server
