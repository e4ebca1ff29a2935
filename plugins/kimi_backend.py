"""The ``kimi`` verifier backend: Kimi-K2.5-family verifiers (``model_type: kimi_k25``).

Kimi-K2.5 is multimodal: its decoder (DeepSeek-V3 architecture, 61 layers, hidden 7168) lives in a
nested ``text_config`` beside a ``vision_config``, its weights under ``language_model.*``, and its
config, tokenizer and modeling code need ``trust_remote_code``. vLLM serves it with the ``kimi_k2``
reasoning parser. Extraction runs through vLLM (the ``vllm`` backend's offline engine, tensor
parallel over every visible GPU: 8 on the production host, as ``VLLMServer.kimi_k25`` serves it):
transformers with ``device_map`` runs one GPU at a time and cannot run the INT4 experts fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.plugins.vllm_backend import VLLMBackend


@dataclass
class KimiBackend(VLLMBackend):
    """vLLM extraction with Kimi's nesting, parser and remote code, text only (no vision inputs).
    The default aux layers for its 61 layers come out as EAGLE-3's [2, 30, 58] (+ final 61)."""

    def text_config(self, model_path):
        """The nested decoder config, read from config.json itself so a missing remote-code class
        (or an old transformers) never stops the pipeline from learning the verifier's shape."""
        from transformers import PretrainedConfig

        raw = json.loads((Path(model_path) / "config.json").read_text())
        if "text_config" not in raw:
            raise ValueError(
                f"{model_path}/config.json has no 'text_config': not a Kimi-K2.5-family checkpoint; "
                "use the 'transformers' backend for plain decoders"
            )
        return PretrainedConfig.from_dict(raw["text_config"])


KIMI_BACKEND = KimiBackend(
    name="kimi",
    description="Kimi-K2.5 family: nested text_config, trust_remote_code, kimi_k2 reasoning parser, "
    "aux layers [2, 30, 58]; extraction through vLLM (extract_hidden_states) at tensor parallel 8.",
    reasoning_parser="kimi_k2",
    trust_remote_code=True,
    engine_extra={"limit_mm_per_prompt": {"vision_chunk": 0}},
)


@hookimpl
def register_verifier_backends(register):
    register(KIMI_BACKEND)
