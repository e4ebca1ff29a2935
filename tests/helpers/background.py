"""Slow session resources opened in a thread of their own: a server's start (a minute of vLLM or `dagster
dev` loading) or a whole demo runs while the tests before the first one that needs it run; that test
waits for it. On 2 cores the suite's own tests rarely keep both busy (a training process is
single-threaded, most tests wait on a child process), so what runs beside them is nearly free."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

T = TypeVar("T")

# The heavy resources (a demo, a vLLM extraction: several GB of memory each) run two at a time, so that a
# test run's peak stays well inside a 24 GB host that other sessions share.
HEAVY = threading.BoundedSemaphore(2)
# Every resource opened in this process, for the run's closing timeline (tests/conftest.py), in seconds
# from this module's import (the test run's start).
OPENED: list[InBackground] = []
_T0 = time.monotonic()


class Aborted(RuntimeError):
    """The run ended before this resource was ready; nobody reads it."""


class InBackground(Generic[T]):
    """``open()`` (a context manager) entered in a thread named ``name``, and left there on ``close()``.
    ``value()`` waits until it is entered and returns what it yielded, or raises what entering raised.
    ``after()`` is waited for first (what this one needs ready), then a place in ``gate`` (``HEAVY``, for
    the heavy ones). ``abort()`` (also called by ``close()``) makes a still unfinished entering fail soon
    through the ``on_abort`` hook: a run that ends early does not wait for a demo nobody will read."""

    def __init__(
        self,
        name: str,
        open: Callable[[], AbstractContextManager[T]],
        on_abort: Callable[[], None] | None = None,
        after: Callable[[], object] | None = None,
        gate: threading.BoundedSemaphore | None = None,
    ):
        self._open, self._on_abort, self._after, self._gate = open, on_abort, after, gate
        self._entered, self._leave, self._aborted = threading.Event(), threading.Event(), threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        # When it began opening (after ``after`` and the gate) and when it was ready.
        self.began_s: float | None = None
        self.ready_s: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        OPENED.append(self)
        self._thread.start()

    @property
    def name(self) -> str:
        return self._thread.name

    def timeline(self) -> str:
        """One line: when it began opening and when it was ready, in seconds from the run's start."""
        began = "never began" if self.began_s is None else f"began at {self.began_s:.0f} s"
        ready = "" if self.ready_s is None else f", ready at {self.ready_s:.0f} s ({self.ready_s - self.began_s:.0f} s)"
        failed = ", failed" if self._error is not None else ""
        return f"{self.name}: {began}{ready}{failed}"

    def _enter(self):
        if self._after is not None:
            self._after()
        if self._gate is not None:
            while not self._gate.acquire(timeout=1):
                if self._aborted.is_set():
                    raise Aborted(f"{self._thread.name}: the run ended before it started")
        try:
            if self._aborted.is_set():
                raise Aborted(f"{self._thread.name}: the run ended before it started")
            self.began_s = time.monotonic() - _T0
            context = self._open()
            entered = context.__enter__()
            self.ready_s = time.monotonic() - _T0
            return context, entered
        finally:
            if self._gate is not None:
                self._gate.release()

    def _run(self) -> None:
        try:
            context, self._value = self._enter()
        except BaseException as exc:  # re-raised in the test that waits
            self._error = exc
            self._entered.set()
            return
        self._entered.set()
        self._leave.wait()
        try:
            context.__exit__(None, None, None)
        except BaseException as exc:  # re-raised on close
            self._error = exc

    def value(self) -> T:
        self._entered.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def abort(self) -> None:
        if not self._entered.is_set():
            self._aborted.set()
            if self._on_abort is not None:
                self._on_abort()

    def close(self) -> None:
        """Leave the context (a server stops, a demo's leftovers are cleaned up) and wait for it, aborting it
        first if it is still being entered; what leaving raised is raised here."""
        self._leave.set()
        while self._thread.is_alive():
            self.abort()
            self._thread.join(timeout=10)
        if self._error is not None and self._value is not None:
            raise self._error
