"""A capture killed mid-run for the resume tests: a script materializing reasoning_samples in a child
process, SIGKILLed once the samples folder holds a few rows."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from eagle_assets.generation.store import load_samples


def kill_after_rows(script: str, tmp_path: Path, storage_root: str, base_url: str, folder: Path, rows: int,
                    timeout_s: float = 300) -> None:
    """Run ``script`` (argv: storage root, base URL) and SIGKILL it once ``folder`` holds ``rows`` rows."""
    path = tmp_path / "materialize.py"
    path.write_text(script)
    child = subprocess.Popen([sys.executable, str(path), storage_root, base_url],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while len(load_samples(folder, columns=["status"])) < rows and time.monotonic() < deadline:
            assert child.poll() is None, "the materializing process ended before it could be killed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
