"""``eagle-assets demo`` as ``make demo`` runs it, in a fresh DAGSTER_HOME (deploy/dagster.yaml) and storage
root: to its end, or to its end after a demo SIGKILLed mid-run in the same folders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.processes import kill_group
from tests.helpers.runs import BIN, KV_CACHE_GB, dagster_home, start, stop_server, wait_until

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


def _command(verifier: str, port: int) -> list[str]:
    return [str(BIN / "eagle-assets"), "demo", "--verifier", verifier, "--port", str(port)]


def _environment(base: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home(base)),
        "EAGLE_ASSETS_DATA": str(base / "data"),
        "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GB,
    }


def _complete(verifier: str, base: Path, port: int, env: dict[str, str], started: list) -> str:
    """Run the demo to its end; its stdout, asserting it succeeded."""
    out, err = base / "demo.stdout", base / "demo.stderr"
    demo = start(_command(verifier, port), Path(env["DAGSTER_HOME"]), out, stderr=err, **env)
    started.append(demo)
    try:
        returncode = demo.wait(timeout=DEMO_TIMEOUT_S)
    finally:
        kill_group(demo)
    output = out.read_text()
    assert returncode == 0, f"demo failed:\n{output[-4000:]}\n{err.read_text()[-4000:]}"
    return output


def stop_demos(started: list, port: int) -> None:
    """Kill the demo processes in ``started`` and the server their demo left on ``port``."""
    for demo in started:
        kill_group(demo)
    stop_server(port)


@contextmanager
def completed_demo(base: Path, verifier: str, port: int, started: list) -> Iterator[Demo]:
    """The demo of ``verifier`` on ``port`` (and the next), run once to its end under ``base``; its process
    is appended to ``started``."""
    env = _environment(base)
    yield Demo(verifier, _complete(verifier, base, port, env, started), env, port)


@contextmanager
def demo_after_a_killed_one(base: Path, verifier: str, port: int, started: list) -> Iterator[Demo]:
    """The demo SIGKILLed on its whole process group (as the OOM killer or a container restart kills it) once
    its first samples are stored, then run again over the same DAGSTER_HOME and storage root to the end,
    with no step in between: the run a user gets after a crash. The killed demo's vLLM server lives on
    (it runs in its own session) for the second one to attach to; the second one, its last user, stops
    it (and so does leaving this, should the demo have failed). Both processes are appended to ``started``."""
    from eagle_assets.core.shards import shard_paths

    env = _environment(base)
    samples, killed_log = base / "data" / "reasoning_samples" / "demo", base / "killed.log"
    killed = start(_command(verifier, port), Path(env["DAGSTER_HOME"]), killed_log, **env)
    started.append(killed)
    try:
        wait_until(
            lambda: shard_paths(samples), FIRST_SAMPLES_TIMEOUT_S, "the first demo's first samples", killed, killed_log
        )
    finally:
        kill_group(killed)
    try:
        output = _complete(verifier, base, port, env, started)
        yield Demo(verifier, output, env, port, killed_output=killed_log.read_text())
    finally:
        stop_server(port)
