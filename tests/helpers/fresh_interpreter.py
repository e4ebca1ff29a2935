"""A test body that needs its own environment variables, run in a fresh interpreter.

The session's background resources (tests/helpers/background.py) are threads of the test process, and the
servers and demos they start inherit its environment when they start: a test that set ``EAGLE_ASSETS_CACHE``
in ``os.environ`` for a few seconds once sent a background verifier build into that test's folder (minutes
of CPU, and the session's chain waited for it). Such a test runs its body here instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CALL = (
    "import importlib, sys; module, name = sys.argv[1].split(':'); "
    "getattr(importlib.import_module(module), name)(*sys.argv[2:])"
)


def call_with_environment(target: str, *args: str, environment: dict[str, str]) -> None:
    """``module:function(*args)`` in a new Python process whose environment is this one's plus
    ``environment``; its failure (an assertion included) fails the caller with the child's output."""
    env = {**os.environ, **environment}
    child = subprocess.run(
        [sys.executable, "-c", _CALL, target, *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert child.returncode == 0, (
        f"{target} failed in its own interpreter:\n{child.stdout[-3000:]}{child.stderr[-5000:]}"
    )
