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

    # An ignored SIGTERM is inherited through fork and exec: a parent that ignores it (seen in CI's pytest
    # process, after some library set it so) would otherwise leave the signal below without effect.
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not this interpreter's main thread: the disposition stays as inherited
        pass

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def exit_when_orphaned(parent_pid: int, poll_s: float = 1.0, grace_s: float = 10.0) -> None:
    """A second guard beside :func:`die_with_parent` for Python workers: a daemon thread that SIGTERMs this
    process once it is no longer ``parent_pid``'s child, and exits it ``grace_s`` later if a handler kept
    it alive; for platforms without the parent-death signal and for parents that die before it is set."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-when-orphaned", daemon=True).start()
