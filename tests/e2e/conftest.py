"""The demo, once per test run and verifier (tests/conftest.py starts each in the background,
tests/helpers/demo.py runs it): every test that needs a demo result reads these fixtures, the demo's
terminal output and log file, its instance and its storage root."""

from __future__ import annotations

import pytest

from tests.helpers.demo import Demo


@pytest.fixture(scope="session")
def demo(demo_run) -> Demo:
    """tiny-qwen3's demo (the default `make demo`), run to its end after a demo SIGKILLed mid-run."""
    return demo_run.value()


@pytest.fixture(scope="session")
def kimi_demo(kimi_demo_run) -> Demo:
    """tiny-kimi's demo (`make demo VERIFIER=tiny-kimi`) in tiny-qwen3's folders, after tiny-qwen3's."""
    return kimi_demo_run.value()


@pytest.fixture(scope="session")
def back_demo(back_demo_run) -> Demo:
    """tiny-qwen3's demo once more in the same folders, after tiny-kimi's."""
    return back_demo_run.value()


@pytest.fixture(scope="session", params=["demo_run", "kimi_demo_run"], ids=["tiny-qwen3", "tiny-kimi"])
def any_demo(request) -> Demo:
    """Each embedded verifier's demo in turn, for the assertions every demo must meet."""
    return request.getfixturevalue(request.param).value()
