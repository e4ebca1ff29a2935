"""The draft the generation server speculates with: a kept ``eagle3_checkpoint`` (or any speculators EAGLE-3
folder), checked against the served verifier, and what each row records of it.

Regeneration on the verifier is the largest GPU cost of a run, and every training run leaves a draft that
vLLM serves as an ``eagle3`` speculator. Speculative decoding is lossless: verified greedily (temperature 0)
it emits exactly the tokens the verifier alone would, and vLLM's rejection sampling keeps the verifier's
distribution at any temperature. A draft changes how fast samples come, not what they are; so it is not part
of the generation recipe (:mod:`.recipe`, the sample set a row belongs to) and a set captured without a draft
is continued with one, and the other way round. Each row still names the draft that served it (the ``draft``
column, JSON of :meth:`Draft.as_dict`; null without one), and the asset's metadata the draft of the run.

A draft trained for another verifier proposes tokens the served one rejects: lossless still, but slower than
no draft, and the sign of a wrong checkpoint. It is refused (:class:`DraftError`): the checkpoint's
``training.json`` records the identity of the verifier it was trained on
(:func:`eagle_assets.backends.verifier_identity`), compared with the served verifier's; a folder without one
is judged by the verifier its ``config.json`` names (``speculators_config.verifier.name_or_path``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from eagle_assets.backends import verifier_identity
from eagle_assets.core.files import checkpoint_hash, file_sha256
from eagle_assets.core.layout import MODEL_FILES, TRAINING_FILE, named_checkpoint, read_training_record
from eagle_assets.reasoning_samples.recipe import ServedVerifier
from eagle_assets.resources import VLLMServer
from eagle_assets.resources.server_lifecycle import VLLMServerError


class DraftError(ValueError):
    """The draft cannot serve this verifier; the message names the field and the fix."""


@dataclass(frozen=True)
class Draft:
    """A draft checkpoint as served: where it is, its content, K, and the verifier it was trained for."""

    path: str
    content_hash: str  # 16 hex digits over config.json and model.safetensors (the draft itself, whichever run kept it)
    config_hash: str  # 16 hex digits of config.json
    num_speculative_tokens: int
    verifier_identity: str | None  # training.json's; None: the folder records none
    verifier_named: str | None  # config.json's speculators_config.verifier.name_or_path
    training_run: str | None

    def as_dict(self) -> dict:
        return asdict(self)

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


class DraftSettings(BaseModel):
    """Which draft the generation server speculates with (launchpad fields of ``reasoning_samples``)."""

    draft_checkpoint: str = Field(
        default="",
        description="A kept eagle3_checkpoint the generation server speculates with (vLLM EAGLE-3, lossless): its "
        "folder name (as `eagle-assets checkpoints` lists it) or path; empty = no draft, unless draft_training_run "
        "names one. Not part of the recipe: the samples are the verifier's either way; each row records its draft.",
    )
    draft_training_run: str = Field(
        default="",
        description="A training run whose latest kept checkpoint is the draft (instead of draft_checkpoint).",
    )
    num_speculative_tokens: int = Field(
        default=3, ge=1, description="Draft tokens vLLM proposes per step (K) when a draft is set."
    )

    @model_validator(mode="after")
    def _one_draft(self) -> DraftSettings:
        if self.draft_checkpoint and self.draft_training_run:
            raise ValueError("draft_checkpoint and draft_training_run both name a draft: set one of them (or neither)")
        return self

    def draft(self, checkpoints: Path, latest_of_run: Callable[[str], Path]) -> Draft | None:
        """The draft these settings name (``checkpoints``: where kept checkpoints live; ``latest_of_run``: a
        training run's latest kept checkpoint); None without one."""
        if self.draft_training_run:
            return read_draft(latest_of_run(self.draft_training_run), self.num_speculative_tokens, "draft_training_run")
        if self.draft_checkpoint:
            return read_draft(named_checkpoint(self.draft_checkpoint, checkpoints), self.num_speculative_tokens)
        return None


def read_draft(folder: str | Path, num_speculative_tokens: int, field: str = "draft_checkpoint") -> Draft:
    """The draft in ``folder``, served with ``num_speculative_tokens``; :class:`DraftError` (naming ``field``)
    when it is not a speculators EAGLE-3 checkpoint."""
    folder = Path(folder)
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise DraftError(
            f"{field}: {folder} is not a draft checkpoint (no {', '.join(missing)}); give a kept eagle3_checkpoint "
            "folder (`eagle-assets checkpoints` lists them) or leave it empty to generate without a draft"
        )
    config = json.loads((folder / "config.json").read_text())
    if config.get("speculators_model_type") != "eagle3":
        raise DraftError(
            f"{field}: {folder}/config.json has speculators_model_type {config.get('speculators_model_type')!r}, "
            "not 'eagle3': vLLM serves it as an eagle3 speculator only if it is one"
        )
    training = read_training_record(folder)
    named = ((config.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    return Draft(
        path=str(folder.resolve()),
        content_hash=checkpoint_hash(folder)[:16],
        config_hash=file_sha256(folder / "config.json")[:16],
        num_speculative_tokens=num_speculative_tokens,
        verifier_identity=(training.get("verifier") or {}).get("identity"),
        verifier_named=named,
        training_run=training.get("training_run"),
    )


def check_draft_verifier(draft: Draft, served: ServedVerifier, field: str = "draft_checkpoint") -> None:
    """Refuse (:class:`DraftError`) a draft trained for another verifier than ``served`` (module docstring)."""
    served_as = f"the served verifier {served.model or served.folder} (identity {served.identity})"
    if draft.verifier_identity is not None:
        if draft.verifier_identity != served.identity:
            raise DraftError(
                f"{field}: the draft {draft.path} was trained for verifier identity {draft.verifier_identity} "
                f"(its {TRAINING_FILE}), not {served_as}: a draft of another verifier only slows generation "
                "down. Give a checkpoint trained on this verifier's samples, or leave it empty"
            )
        return
    named = draft.verifier_named
    if named and (named == served.model or (Path(named).is_dir() and verifier_identity(named) == served.identity)):
        return
    raise DraftError(
        f"{field}: the draft {draft.path} records no {TRAINING_FILE} and its config.json names verifier "
        f"{named!r}, which is not {served_as}: give a checkpoint trained on this verifier, or leave it empty"
    )


def speculating_server(server: VLLMServer, draft: Draft | None) -> VLLMServer:
    """``server`` speculating with ``draft`` (itself without one); only a managed server can be told to."""
    if draft is None:
        return server
    if server.mode != "managed":
        raise DraftError(
            f"draft_checkpoint/draft_training_run: vllm_server mode {server.mode!r} runs what its owner started; "
            "the draft is served by a server this asset starts (mode 'managed'). Leave the draft empty, or start "
            "that server with --speculative-config yourself"
        )
    try:
        return server.speculating(draft.path, draft.num_speculative_tokens)
    except VLLMServerError as exc:
        raise DraftError(str(exc)) from None
