"""A capture killed mid-run for the resume tests: a script materializing reasoning_samples in a child
process, SIGKILLed once the samples folder holds a few rows.

The child is not raced: once its shard writer has put ``rows`` rows on disk, the writer thread holds
(answered rows after that stay in memory, requests go on) and the child says so with a file; then it
is killed. So the kill always lands mid-run, however fast the server answers or slow the host is, and
it loses what a real kill loses: the rows answered but not yet written, and the requests in flight.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

# Prepended to the materializing script; argv[3] is the row count to hold at, argv[4] the file to touch.
_HOLD_WRITER = '''
import pathlib as _pathlib, sys as _sys, threading as _threading
from eagle_assets.generation import store as _store
_hold_at, _ready = int(_sys.argv[3]), _pathlib.Path(_sys.argv[4])
_write = _store.ShardWriter._write
def _write_then_hold(self, rows, path):
    _write(self, rows, path)
    if self.rows_written >= _hold_at:
        _ready.touch()
        _threading.Event().wait()
_store.ShardWriter._write = _write_then_hold
'''


def kill_after_rows(script: str, tmp_path: Path, storage_root: str, base_url: str, rows: int,
                    timeout_s: float = 300) -> None:
    """Run ``script`` (argv: storage root, base URL) and SIGKILL it once its writer has stored ``rows`` rows."""
    path, ready = tmp_path / "materialize.py", tmp_path / "writer-held"
    path.write_text(_HOLD_WRITER + script)
    child = subprocess.Popen([sys.executable, str(path), storage_root, base_url, str(rows), str(ready)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            assert child.poll() is None, "the materializing process ended before it could be killed"
            assert time.monotonic() < deadline, f"no {rows} rows stored within {timeout_s:.0f} s"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
