"""The verifier every model-facing asset agrees on: which model, through which backend, which layers."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from eagle_assets.backends import VerifierBackend


class Verifier(dg.ConfigurableResource):
    """The verifier model and the backend that reads it (tokenizer, template, hidden states).

    `token_sequences` renders with its chat template, `hidden_states` extracts its layers, and
    training and evaluation find the verifier folder here.
    """

    model_path: str = Field(
        default="",
        description="Hugging Face model folder of the verifier; empty = the embedded verifier named by "
        "`embedded` (built and cached on first use).",
    )
    embedded: str = Field(
        default="tiny-qwen3",
        description="The embedded verifier used when model_path is empty: tiny-qwen3 (backend transformers) or "
        "tiny-kimi (Kimi-K2.5-shaped; backend kimi, and the server's reasoning parser kimi_k2).",
    )
    backend: str = Field(
        default="transformers",
        description="Registered verifier backend (`eagle-assets plugins` lists them): transformers, vllm, kimi, ...",
    )
    aux_layer_ids: list[int] = Field(
        default_factory=list,
        description="EAGLE-3 auxiliary layer ids (layer k = output of k decoder layers); empty = the "
        "backend's default, [2, n//2, n-3] for most models. The final layer is always added.",
    )
    device: str = Field(default="auto", description="Extraction device: auto (cuda if present), cuda, cuda:1, cpu.")
    devices: list[str] = Field(
        default_factory=lambda: ["auto"],
        description="Extraction worker processes, one per entry, each with a whole copy of the verifier "
        "(data parallel; transformers backend): ['auto'] = one per visible CUDA GPU when `device` is auto "
        "or cuda and there are several, else one in-process extraction on `device`; or explicit, e.g. "
        "['cuda:0', 'cuda:1'] or ['cpu', 'cpu']. A verifier too large for one GPU needs a tensor-parallel "
        "backend instead (vllm, kimi).",
    )
    dtype: str = Field(default="auto", description="Compute dtype: auto (bf16 on GPU, fp32 on CPU), bfloat16, float32.")
    feature_dtype: Literal["bfloat16", "fp8"] = Field(
        default="bfloat16",
        description="Storage dtype of the hidden_states files (not the compute dtype above): bfloat16, or fp8 = "
        "hs-connectors' FP8 format (e4m3 states + one fp32 scale per token under hidden_states_scales), half "
        "the bytes; speculators' trainer reads it with its `fp8` hidden-states backend. The dtype is part of "
        "each file's content id, so switching it re-extracts instead of reusing the other dtype's files.",
    )
    batch_tokens: int = Field(
        default=16384,
        gt=0,
        description="Padded tokens per extraction batch (rows x longest row); 16384 = 8 rows of 2K on one H200.",
    )

    def resolved_model_path(self) -> Path:
        if self.model_path:
            path = Path(self.model_path).expanduser()
            if not (path / "config.json").exists():
                raise FileNotFoundError(
                    f"verifier.model_path {path} has no config.json: point it at a Hugging Face model folder "
                    "(or leave it empty for the embedded tiny verifier)"
                )
            return path
        from eagle_assets.tiny_verifier.embedded import embedded_verifier

        return embedded_verifier(self.embedded).path()

    def get_backend(self) -> VerifierBackend:
        from eagle_assets.plugin_manager import verifier_backend

        return verifier_backend(self.backend)

    def layer_ids(self) -> list[int]:
        """Aux ids (configured or default) followed by the final layer id."""
        return self.get_backend().capture_layer_ids(self.resolved_model_path(), self.aux_layer_ids or None)

    def extraction_devices(self) -> list[str]:
        """The device of each extraction worker (see ``devices``)."""
        from eagle_assets.hidden_states.parallel import resolve_devices

        return resolve_devices(self.devices, self.device, self.get_backend())

    def identity(self) -> str:
        return self.get_backend().identity(self.resolved_model_path())
