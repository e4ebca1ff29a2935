"""Extraction backends that fail on purpose, for the extraction-worker tests.

Each worker process is spawned and unpickles its backend by module name, so this module imports nothing
heavy (no Dagster, no test module): a spawned worker pays only for what a real worker imports.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.plugins.transformers_backend import TransformersBackend


@dataclass
class PoisonedBackend(TransformersBackend):
    """The real transformers backend on a verifier whose embedding of one token is NaN: every row
    holding that token yields NaN states, which the sample writer refuses (a real failure mode of
    broken weights)."""

    poison_token: int = -1

    def load_model(self, model_path, device="auto", dtype="auto"):
        model = super().load_model(model_path, device, dtype)
        model.get_input_embeddings().weight.data[self.poison_token] = float("nan")
        return model


class PoisonedPlugin:
    def __init__(self, token: int):
        self.backend = PoisonedBackend(name="poisoned", description="NaN embedding for one token", poison_token=token)

    @hookimpl
    def register_verifier_backends(self, register):
        register(self.backend)


@dataclass
class VanishingBackend(TransformersBackend):
    """A worker that is killed outright (as the kernel's OOM killer would) before it can report."""

    def extract(self, model_path, request, sink, progress=None):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class HangingBackend(TransformersBackend):
    """A worker that announces itself (a file named by its pid) and then hangs, as a stuck forward would."""

    ready_dir: str = ""

    def extract(self, model_path, request, sink, progress=None):
        (Path(self.ready_dir) / str(os.getpid())).touch()
        time.sleep(600)
