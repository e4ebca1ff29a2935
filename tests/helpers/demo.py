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
def demo_beside(earlier: Demo, base: Path, verifier: str, port: int, started: list) -> Iterator[Demo]:
    """The demo of ``verifier`` on ``port`` (and the next), run to its end in ``earlier``'s DAGSTER_HOME and
    storage root, as a user runs `make demo VERIFIER=...` after a first `make demo`; its terminal files go
    under ``base`` and its process is appended to ``started``."""
    yield Demo(verifier, _complete(verifier, base, port, earlier.env, started), earlier.env, port)


@contextmanager
def demo_after_a_killed_one(base: Path, verifier: str, port: int, started: list) -> Iterator[Demo]:
    """The demo SIGKILLed on its whole process group (as the OOM killer or a container restart kills it) once
    its first samples are stored, then run again over the same DAGSTER_HOME and storage root to the end,
    with no step in between: the run a user gets after a crash. The killed demo's vLLM server lives on
    (it runs in its own session) for the second one to attach to; the second one, its last user, stops
    it (and so does leaving this, should the demo have failed). Both processes are appended to ``started``."""
    from eagle_assets.core.layout import samples_folder
    from eagle_assets.core.shards import shard_paths

    env = _environment(base)
    killed_log = base / "killed.log"
    killed = start(_command(verifier, port), Path(env["DAGSTER_HOME"]), killed_log, **env)
    started.append(killed)
    try:
        wait_until(
            lambda: shard_paths(samples_folder(base / "data", "demo")),
            FIRST_SAMPLES_TIMEOUT_S,
            "the first demo's first samples",
            killed,
            killed_log,
        )
    finally:
        kill_group(killed)
    try:
        output = _complete(verifier, base, port, env, started)
        yield Demo(verifier, output, env, port, killed_output=killed_log.read_text())
    finally:
        stop_server(port)


# A second training run beside the demo's, in the demo's instance: its recipe's settings (the demo's recipe,
# one epoch, the default accuracy floor) and its evaluation's (12 prompts per set, an MT-Bench-shaped suite
# beside the held-out and out-of-distribution sets, and a sweep of K).
SECOND_RUN = "one-epoch"
SECOND_RECIPE = {"epochs": 1}
SECOND_EVAL = {
    "suites": ["heldout", "ood", "mt_bench"],
    "max_prompts": 12,
    "max_tokens": 384,
    "min_acceptance_length": 1.0,
    "sweep_num_speculative_tokens": [2, 3],
    "sweep_max_prompts": 6,
}
# MT-Bench's shape (question.jsonl): arithmetic in the demo's words (what the draft learned) and a follow-up
# turn that refers to the first answer.
MT_BENCH_ROWS = [
    {"question_id": 900 + i, "category": category, "turns": [first, second]}
    for i, (category, first, second) in enumerate(
        [
            ("math", "What is 17 + 25?", "Now subtract 9 from your answer."),
            ("math", "Compute 12 * 13.", "Is your answer even?"),
            ("reasoning", "What is 300 - 123?", "Add 23 to that result."),
            ("math", "What is 48 + 52?", "Multiply your answer by 2."),
        ]
    )
]
# argv: storage root, embedded verifier, the demo's port, training run, the step ("trained" or "evaluated"), its
# config (JSON), the JSON file for the step's run id and outcome. DAGSTER_HOME is the demo's.
_SECOND_RUN_SCRIPT = """
import json, sys
import dagster as dg
from eagle_assets.core.partitions import add_training_run
from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
from eagle_assets.eagle3_eval import asset as eagle3_eval
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.orchestration.recovery import in_process_runs
from eagle_assets.resources import StorageRoot
from eagle_assets.resources.embedded import embedded_resources
if __name__ == "__main__":
    root, verifier, port, run, step, config, out = sys.argv[1:8]
    built = [family.build(source_partitions()) for family in (eagle3_checkpoint, eagle3_eval)]
    defs = [d for b in built for d in (*b["assets"], *b.get("checks", []))]
    resources = {"storage": StorageRoot(root=root), **embedded_resources(verifier, port=int(port))}
    op, selection = {"trained": ("eagle3_checkpoint", ["eagle3_checkpoint"]),
                     "evaluated": ("eagle3_eval", dg.AssetSelection.assets("eagle3_eval"))}[step]
    with dg.DagsterInstance.get() as instance, in_process_runs(instance, by="test") as worker:
        add_training_run(instance, run)
        result = dg.materialize(defs, selection=selection, instance=instance, resources=resources,
                                partition_key=run, tags=worker, raise_on_error=False,
                                run_config={"ops": {op: {"config": json.loads(config)}}})
    with open(out, "w") as fh:
        json.dump({"success": result.success, "run_id": result.run_id}, fh)
"""


def second_eval_config(base: Path) -> dict:
    """The second run's evaluation config: ``SECOND_EVAL`` with the MT-Bench suite read from ``MT_BENCH_ROWS``,
    written under ``base``."""
    import json

    suite = base / "mt_bench"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "question.jsonl").write_text("".join(json.dumps(row) + "\n" for row in MT_BENCH_ROWS))
    return {**SECOND_EVAL, "suite_locations": {"mt_bench": str(suite)}}


def second_run_config() -> dict:
    """The second run's training config: the demo's recipe with ``SECOND_RECIPE`` and the default accuracy
    floor."""
    from eagle_assets.demo.command import DEMO_OPS
    from eagle_assets.eagle3_checkpoint.asset import MIN_VAL_ACCURACY

    return {**DEMO_OPS["eagle3_checkpoint"]["config"], **SECOND_RECIPE, "min_val_accuracy": MIN_VAL_ACCURACY}


@contextmanager
def second_run_step(demo: Demo, base: Path, step: str, started: list) -> Iterator[dict]:
    """One step of ``SECOND_RUN`` in a process of its own on the demo's resources and instance: ``"trained"``
    (the second recipe on the demo's data) or ``"evaluated"`` (:func:`second_eval_config`, its own speculating
    servers from the port after the demo's). Yields {"success", "run_id"}; the process is appended to ``started``."""
    import json
    import sys

    out, log = base / f"second-run-{step}.json", base / f"second-run-{step}.log"
    config = second_run_config() if step == "trained" else second_eval_config(base)
    argv = [
        sys.executable,
        "-c",
        _SECOND_RUN_SCRIPT,
        str(demo.root),
        demo.verifier,
        str(demo.port),
        SECOND_RUN,
        step,
        json.dumps(config),
        str(out),
    ]
    env = {k: demo.env[k] for k in ("EAGLE_ASSETS_DATA", "VLLM_CPU_KVCACHE_SPACE")}
    process = start(argv, demo.home, log, **env)
    started.append(process)
    try:
        returncode = process.wait(timeout=DEMO_TIMEOUT_S)
    finally:
        kill_group(process)
    assert returncode == 0, f"the second training run's step {step!r} crashed:\n{log.read_text()[-4000:]}"
    yield json.loads(out.read_text())
