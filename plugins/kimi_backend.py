"""The ``kimi`` verifier backend: Kimi-K2.5-family verifiers (``model_type: kimi_k25``).

Kimi-K2.5 is multimodal: its decoder (DeepSeek-V3 architecture, 61 layers, hidden 7168) lives in a
nested ``text_config`` beside a ``vision_config``, its weights under ``language_model.*``, and its
config, tokenizer and modeling code need ``trust_remote_code``. vLLM serves it with the ``kimi_k2``
reasoning parser. Extraction runs through transformers (``device_map`` over the host's GPUs):
vLLM 0.32's hidden-states connector does not support MLA verifiers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.plugins.transformers_backend import TransformersBackend, resolve_device, resolve_dtype


@dataclass
class KimiBackend(TransformersBackend):
    """Transformers extraction with Kimi's nesting, parser and remote code. The default aux layers
    for its 61 layers come out as EAGLE-3's [2, 30, 58]."""

    data_parallel: bool = False  # one process: the model is spread over every GPU (device_map)

    def text_config(self, model_path):
        """The nested decoder config, read from config.json itself so a missing remote-code class
        (or an old transformers) never stops the pipeline from learning the verifier's shape."""
        from transformers import PretrainedConfig

        raw = json.loads((Path(model_path) / "config.json").read_text())
        if "text_config" not in raw:
            raise ValueError(f"{model_path}/config.json has no 'text_config': not a Kimi-K2.5-family checkpoint; "
                             "use the 'transformers' backend for plain decoders")
        return PretrainedConfig.from_dict(raw["text_config"])

    def load_model(self, model_path, device: str = "auto", dtype: str = "auto"):
        """Spread over every visible GPU (~595 GB: no single GPU holds it)."""
        from transformers import AutoModel

        device = resolve_device(device)
        model = AutoModel.from_pretrained(
            str(model_path), dtype=resolve_dtype(dtype, device), trust_remote_code=True,
            device_map="auto" if device == "cuda" else None,
        )
        return model.eval()


KIMI_BACKEND = KimiBackend(
    name="kimi",
    description="Kimi-K2.5 family: nested text_config, trust_remote_code, kimi_k2 reasoning parser, "
    "aux layers [2, 30, 58]; extraction through transformers.",
    reasoning_parser="kimi_k2",
    trust_remote_code=True,
)


@hookimpl
def register_verifier_backends(register):
    register(KIMI_BACKEND)
