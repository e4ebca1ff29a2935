"""What one request asks the verifier: the prompt (or one turn of a conversation) and its sampling."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from eagle_assets.core.layout import LAST_TURN_ONLY


@dataclass(frozen=True)
class PromptRequest:
    prompt_id: str
    messages: list[dict]
    split: str | None = None
    sampling: Sampling | None = None  # this prompt's own (its sampling variant); None: the engine's
    turn: int = LAST_TURN_ONLY  # which assistant turn of the conversation this asks for (see .turns)


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every request (and stored with every row)."""

    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 8192
    seed: int | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    variant: str | None = None  # the sampling variant's name (eagle_assets.reasoning_samples.variants), if any

    def as_json(self) -> str:
        settings = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "chat_template_kwargs": self.chat_template_kwargs,
        }
        if self.variant is not None:  # a request without a variant names none
            settings["variant"] = self.variant
        return json.dumps(settings, sort_keys=True)

    def request_seed(self, prompt_id: str, turn: int = LAST_TURN_ONLY) -> int | None:
        """A per-prompt (per-turn) seed, so a sample does not depend on which other prompts shared the run."""
        if self.seed is None:
            return None
        key = prompt_id if turn == LAST_TURN_ONLY else f"{prompt_id}:{turn}"
        digest = hashlib.sha256(f"{self.seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
