"""A capture killed mid-run for the resume tests: reasoning_samples materialized in a child process,
SIGKILLed once the samples folder holds a few rows.

The child is not raced: once its shard writer has put ``rows`` rows on disk, the writer thread holds
(answered rows after that stay in memory, requests go on) and the child says so with a file; then it
is killed. So the kill always lands mid-run, however fast the server answers or slow the host is, and
it loses what a real kill loses: the rows answered but not yet written, and the requests in flight.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.processes import kill_group

# argv: storage root, base URL, the row count to hold the writer at, the file to touch then, the op config (JSON),
# the verifier's model folder (what the external server serves).
_SCRIPT = """
import json, pathlib, sys, threading
import dagster as dg
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.reasoning_samples import store
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer

root, url, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[5])
hold_at, ready = int(sys.argv[3]), pathlib.Path(sys.argv[4])
write = store.ShardWriter._write

def write_then_hold(self, rows, path):
    write(self, rows, path)
    if self.rows_written >= hold_at:
        ready.touch()
        threading.Event().wait()

store.ShardWriter._write = write_then_hold
dg.materialize(
    reasoning_samples.build(source_partitions())["assets"], partition_key="demo",
    resources={
        "storage": StorageRoot(root=root),
        "vllm_server": VLLMServer(mode="external", base_urls=[url]),
        "verifier": Verifier(model_path=sys.argv[6]),
    },
    run_config={"ops": {"reasoning_samples": {"config": config}}},
)
"""


def kill_after_rows(
    config: dict,
    tmp_path: Path,
    storage_root: str,
    base_url: str,
    rows: int,
    verifier: str | Path,
    timeout_s: float = 300,
) -> None:
    """Materialize reasoning_samples (partition ``demo``, op ``config``) against ``base_url``, a server of the
    model folder ``verifier``, in a child process, and SIGKILL it once its writer has stored ``rows`` rows."""
    path, ready = tmp_path / "materialize.py", tmp_path / "writer-held"
    path.write_text(_SCRIPT)
    child = subprocess.Popen(
        [sys.executable, str(path), storage_root, base_url, str(rows), str(ready), json.dumps(config), str(verifier)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            assert child.poll() is None, "the materializing process ended before it could be killed"
            assert time.monotonic() < deadline, f"no {rows} rows stored within {timeout_s:.0f} s"
            time.sleep(0.05)
    finally:
        kill_group(child)
