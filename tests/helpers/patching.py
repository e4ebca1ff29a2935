"""Patching one module's view of a shared one. Unit tests run beside the session's background resources
(tests/helpers/background.py: threads of this process), so a test that patched ``os.replace`` or
``time.monotonic`` itself would change them for those threads too; a shadow changes them for one module."""

from __future__ import annotations

import types
from typing import Any

import pytest


class _Shadow(types.SimpleNamespace):
    def __init__(self, real: types.ModuleType, **overrides: Any):
        super().__init__(**overrides)
        self._real = real

    def __getattr__(self, name: str) -> Any:  # only for names not overridden
        return getattr(self._real, name)


def shadow(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType, name: str, **overrides: Any) -> None:
    """``module.<name>`` (a module it imported, e.g. ``os``) replaced, for ``module`` alone, by a stand-in
    that has ``overrides`` and otherwise is the real one."""
    monkeypatch.setattr(module, name, _Shadow(getattr(module, name), **overrides))
