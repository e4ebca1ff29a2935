"""A generation recipe: everything that decides what a reasoning sample is, named by one id.

Two samples of one prompt are interchangeable only when the same verifier wrote them the same way: the
same served model (its config, tokenizer and weights), chat template, reasoning parser, sampling,
sampling variants and turn mode. The recipe holds those facts; its ``recipe_id`` (16 hex digits over
their sorted JSON) names the sample set ``reasoning_samples/<partition>/recipes/<recipe id>/`` that holds
its rows, every row records it (``recipe`` column), and ``recipe.json`` in the set records the recipe.
Request plumbing (concurrency, timeouts, retries, shard sizes) and the quality rules are not part of it:
they change how or how fast samples are stored or judged, not what the verifier wrote.

Which verifier wrote the samples is known from a local model folder only. The folder fingerprinted is the
served model's when that is a local folder (a managed server's ``model``, the embedded verifier it
serves, or an external server's ``model`` when set to one), otherwise the ``verifier`` resource's, the
folder that ``token_sequences`` and ``hidden_states`` read: an external server serving another model
than that one cannot be seen from here. ``fingerprinted`` says which it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eagle_assets.backends import verifier_identity
from eagle_assets.core.files import combined_hash, file_sha256, write_json
from eagle_assets.core.layout import RECIPE_FILE, TURN_MODES
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.resources import Verifier, VLLMServer

SERVED_FOLDER = "served model folder"
VERIFIER_FOLDER = "verifier resource folder (the served model is not a local folder)"
# The files that decide how text becomes token ids (tokenizer_config.json counts without its chat template).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json", "*.model", "*.tiktoken")
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def tokenizer_hash(folder: str | Path) -> str:
    """16 hex digits over a model folder's tokenizer files: equal hashes encode text to the same ids."""
    folder = Path(folder)
    files = sorted({p for pattern in TOKENIZER_FILES for p in folder.glob(pattern) if p.is_file()})
    if not files:
        raise FileNotFoundError(f"{folder} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    parts = [f"{p.name}:{file_sha256(p)}" for p in files]
    config = folder / TOKENIZER_CONFIG
    if config.is_file():
        settings = {k: v for k, v in json.loads(config.read_text()).items() if k != "chat_template"}
        parts.append(f"{TOKENIZER_CONFIG}:{json.dumps(settings, sort_keys=True)}")
    return combined_hash(parts)[:16]


def chat_template_hash(folder: str | Path) -> str | None:
    """16 hex digits of a model folder's chat template text (``token_sequences``' template_hash of the
    tokenizer loaded from it); None without one."""
    folder = Path(folder)
    template = folder / CHAT_TEMPLATE_FILE
    if template.is_file():
        text = template.read_text()
    else:
        config = folder / TOKENIZER_CONFIG
        text = json.loads(config.read_text()).get("chat_template") if config.is_file() else None
        if text is None:
            return None
        text = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ServedVerifier:
    """The verifier that answers, as far as a local folder says: what is served and its fingerprints."""

    model: str | None  # the served model, a path or a name; None: the server resource does not name it
    fingerprinted: str  # SERVED_FOLDER or VERIFIER_FOLDER: which folder the hashes below are of
    folder: str
    identity: str  # eagle_assets.backends.verifier_identity: config, tokenizer, template, weights
    tokenizer_hash: str
    chat_template_hash: str | None
    reasoning_parser: str | None

    @classmethod
    def of_folder(
        cls, folder: str | Path, *, model: str | None, fingerprinted: str, reasoning_parser: str | None
    ) -> ServedVerifier:
        return cls(
            model=model,
            fingerprinted=fingerprinted,
            folder=str(folder),
            identity=verifier_identity(folder),
            tokenizer_hash=tokenizer_hash(folder),
            chat_template_hash=chat_template_hash(folder),
            reasoning_parser=reasoning_parser or None,
        )


def served_verifier(server: VLLMServer, verifier: Verifier) -> ServedVerifier:
    """The verifier ``server`` answers with (module docstring: which folder is fingerprinted)."""
    # A managed server runs resolved_model(); systemd and external servers run what their owner chose.
    model = server.resolved_model() if server.mode == "managed" else (server.model or None)
    parser = server.reasoning_parser
    if model and Path(model).is_dir():
        return ServedVerifier.of_folder(model, model=model, fingerprinted=SERVED_FOLDER, reasoning_parser=parser)
    folder = verifier.resolved_model_path()
    return ServedVerifier.of_folder(folder, model=model, fingerprinted=VERIFIER_FOLDER, reasoning_parser=parser)


@dataclass(frozen=True)
class Recipe:
    """The served verifier and the settings that shape each sample (``settings`` keys are the asset's
    config field names)."""

    verifier: ServedVerifier
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, verifier: ServedVerifier, sampling: Sampling, variants: Sequence[Any], turns: str) -> Recipe:
        if turns not in TURN_MODES:
            raise ValueError(f"turns {turns!r}: use one of {TURN_MODES}")
        settings = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": sampling.seed,
            "chat_template_kwargs": sampling.chat_template_kwargs,
            "sampling_variants": [asdict(v) for v in variants],
            "turns": turns,
        }
        # Through JSON once, so that a recipe read back from recipe.json compares (and hashes) equal.
        return cls(verifier, json.loads(json.dumps(settings)))

    def as_dict(self) -> dict:
        return {"verifier": asdict(self.verifier), "settings": dict(self.settings)}

    @property
    def recipe_id(self) -> str:
        return combined_hash([json.dumps(self.as_dict(), sort_keys=True)])[:16]

    def changed_settings(self, other: Recipe) -> list[tuple[str, Any, Any]]:
        """``(setting, this recipe's value, other's value)`` for each setting the two differ in."""
        names = sorted(set(self.settings) | set(other.settings))
        return [
            (name, self.settings.get(name), other.settings.get(name))
            for name in names
            if self.settings.get(name) != other.settings.get(name)
        ]


def write_recipe(folder: Path, recipe: Recipe) -> None:
    """Record ``recipe`` in its sample set ``folder`` (once: a set's recipe never changes)."""
    path = Path(folder) / RECIPE_FILE
    if not path.exists():
        write_json({"recipe_id": recipe.recipe_id, **recipe.as_dict()}, path)


def read_recipe(folder: str | Path) -> Recipe | None:
    """The recipe of the sample set ``folder`` (None when it has none: nothing was generated there)."""
    path = Path(folder) / RECIPE_FILE
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return Recipe(ServedVerifier(**stored["verifier"]), stored["settings"])
