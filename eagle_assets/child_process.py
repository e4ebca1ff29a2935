"""Child processes that must not outlive the process that started them."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (PR_SET_PDEATHSIG), so a killed Dagster
    step leaves no trainer or extraction worker holding GPUs; a no-op elsewhere."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def exit_when_orphaned(parent_pid: int, poll_s: float = 1.0, grace_s: float = 10.0) -> None:
    """A second guard beside :func:`die_with_parent` for Python workers: a daemon thread that SIGTERMs this
    process once it is no longer ``parent_pid``'s child (and exits it ``grace_s`` later if that did not),
    for when the parent-death signal is not delivered (a CI run saw extraction workers outlive their
    killed parent by minutes) or not supported."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-when-orphaned", daemon=True).start()
