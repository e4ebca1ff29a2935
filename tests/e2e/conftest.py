"""The demo, once per test run and verifier: ``eagle-assets demo`` as ``make demo`` runs it, in a fresh
DAGSTER_HOME (deploy/dagster.yaml) and storage root. Every test that needs a demo result reads these
session fixtures: the demo's terminal output and log file, its instance, its storage root.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.ports import free_port
from tests.helpers.processes import kill_group
from tests.helpers.runs import BIN, KV_CACHE_GB, dagster_home, start, wait_until

FIRST_SAMPLES_TIMEOUT_S = 900
DEMO_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Demo:
    verifier: str
    output: str  # the completed demo's terminal output (stdout)
    env: dict[str, str]  # the environment it ran in: DAGSTER_HOME, EAGLE_ASSETS_DATA, VLLM_CPU_KVCACHE_SPACE
    port: int  # its vLLM server's; its evaluation's speculating server took the next one
    killed_output: str | None = None  # what the demo SIGKILLed before it had written, if one was

    @property
    def home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    @property
    def root(self) -> Path:
        return Path(self.env["EAGLE_ASSETS_DATA"])


def _demo_command(verifier: str, port: int) -> list[str]:
    return [str(BIN / "eagle-assets"), "demo", "--verifier", verifier, "--port", str(port)]


def _complete(verifier: str, base: Path, port: int, env: dict[str, str]) -> str:
    """Run the demo to its end in DAGSTER_HOME ``base/dagster_home``; its stdout, asserting it succeeded."""
    out, err = base / "demo.stdout", base / "demo.stderr"
    demo = start(_demo_command(verifier, port), Path(env["DAGSTER_HOME"]), out, stderr=err, **env)
    try:
        returncode = demo.wait(timeout=DEMO_TIMEOUT_S)
    finally:
        kill_group(demo)
    output = out.read_text()
    assert returncode == 0, f"demo failed:\n{output[-4000:]}\n{err.read_text()[-4000:]}"
    return output


def _stop_server(port: int) -> None:
    """The demo's managed server, should a failed demo have left it running (a no-op otherwise)."""
    subprocess.run([str(BIN / "eagle-assets"), "servers", "--stop", str(port)], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """tiny-qwen3's demo (the default `make demo`), SIGKILLed on its whole process group (as the OOM killer or
    a container restart kills it) once its first samples are stored, then run again over the same
    DAGSTER_HOME and storage root to the end, with no step in between: the run a user gets after a
    crash. The killed demo's vLLM server lives on (it runs in its own session) for the second one to
    attach to; the second one, its last user, stops it."""
    from eagle_assets.reasoning_samples.store import shard_paths
    from eagle_assets.tiny_verifier.embedded import embedded_verifier

    verifier = "tiny-qwen3"
    embedded_verifier(verifier).path()  # built (or taken from the cache) before the timeouts start
    base = tmp_path_factory.mktemp(f"demo-{verifier}")
    home, port = dagster_home(base), free_port(span=2)
    env = {**os.environ, "DAGSTER_HOME": str(home), "EAGLE_ASSETS_DATA": str(base / "data"),
           "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GB}
    samples = base / "data" / "reasoning_samples" / "demo"
    killed_log = base / "killed.log"
    killed = start(_demo_command(verifier, port), home, killed_log, **env)
    try:
        wait_until(lambda: shard_paths(samples), FIRST_SAMPLES_TIMEOUT_S, "the first demo's first samples", killed,
                   killed_log)
    finally:
        kill_group(killed)
    try:
        yield Demo(verifier, _complete(verifier, base, port, env), env, port, killed_output=killed_log.read_text())
    finally:
        _stop_server(port)


@pytest.fixture(scope="session")
def kimi_demo(tmp_path_factory, kimi_server_config, kimi_server_urls):
    """tiny-kimi's demo (`make demo VERIFIER=tiny-kimi`), run once to its end. Its capture attaches to the
    session's tiny-kimi server (tests/conftest.py serves it as the demo does, on the port given here)
    instead of starting another; its speculating server is its own."""
    verifier = "tiny-kimi"
    base = tmp_path_factory.mktemp(f"demo-{verifier}")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home(base)), "EAGLE_ASSETS_DATA": str(base / "data"),
           "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GB}
    yield Demo(verifier, _complete(verifier, base, kimi_server_config.port, env), env, kimi_server_config.port)


@pytest.fixture(scope="session", params=["tiny-qwen3", "tiny-kimi"])
def any_demo(request) -> Demo:
    """Each embedded verifier's demo in turn, for the assertions every demo must meet."""
    return request.getfixturevalue({"tiny-qwen3": "demo", "tiny-kimi": "kimi_demo"}[request.param])
