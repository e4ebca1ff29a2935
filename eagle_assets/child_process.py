"""Child processes that must not outlive the process that started them."""

from __future__ import annotations

import signal
import sys


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (PR_SET_PDEATHSIG), so a killed Dagster
    step leaves no trainer or extraction worker holding GPUs; a no-op elsewhere."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
