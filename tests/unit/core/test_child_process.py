"""A child process ends with its parent, even one that inherited an ignored SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time


def test_an_orphaned_worker_terminates_even_when_it_inherited_an_ignored_sigterm():
    """A worker started by a process that ignores SIGTERM inherits that, and the parent-death signal would do
    nothing: die_with_parent restores the default; the orphan guard, told a parent the process does not
    have, then ends it at once by SIGTERM (not by its later _exit)."""
    script = (
        "import time; from eagle_assets.core.child_process import die_with_parent, exit_when_orphaned; "
        "die_with_parent(); exit_when_orphaned(-1, poll_s=0.01); time.sleep(60)"
    )
    started = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-c", script], timeout=60, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)
    )
    assert child.returncode == -signal.SIGTERM and time.monotonic() - started < 30
