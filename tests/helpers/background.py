"""Slow session resources opened in a thread of their own: a server's start (a minute of vLLM or `dagster
dev` loading) or a whole demo runs while the tests before the first one that needs it run; that test
waits for it. On 2 cores the suite's own tests rarely keep both busy (a training process is
single-threaded, most tests wait on a child process), so what runs beside them is nearly free."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

T = TypeVar("T")


class InBackground(Generic[T]):
    """``open()`` (a context manager) entered in a thread named ``name``, and left there on ``close()``.
    ``value()`` waits until it is entered and returns what it yielded, or raises what entering raised.
    ``abort()`` makes a still unfinished entering fail soon (a run that ends early does not wait for a
    demo nobody will read)."""

    def __init__(
        self, name: str, open: Callable[[], AbstractContextManager[T]], abort: Callable[[], None] | None = None
    ):
        self._open, self._abort = open, abort
        self._entered, self._leave = threading.Event(), threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._open() as value:
                self._value = value
                self._entered.set()
                self._leave.wait()
        except BaseException as exc:  # re-raised in the test that waits, or on close
            self._error = exc
        finally:
            self._entered.set()

    def value(self) -> T:
        self._entered.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def close(self) -> None:
        """Leave the context (a server stops, a demo's leftovers are cleaned up) and wait for it; what that
        raised is raised here."""
        self._leave.set()
        while self._thread.is_alive():
            if self._abort is not None and not self._entered.is_set():
                self._abort()
            self._thread.join(timeout=10)
        if self._error is not None and self._value is not None:
            raise self._error
