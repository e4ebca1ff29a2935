"""The verifier every model-facing asset agrees on: which model, through which backend, which layers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from eagle_assets.backends import VerifierBackend
from eagle_assets.plugin_manager import verifier_backend
from eagle_assets.tiny_verifier.embedded import embedded_verifier

AUTO = "auto"
_CUDA = re.compile(r"cuda:(\d+)")


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
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="More vLLM engine arguments for the extraction engine of the vllm and kimi backends (as "
        '`vllm.LLM` takes them, e.g. {"gpu_memory_utilization": 0.85}); empty = none, or the embedded '
        "verifier's own when model_path is empty.",
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
        return embedded_verifier(self.embedded).path()

    def resolved_engine_args(self) -> dict[str, Any]:
        """``engine_args``, over the embedded verifier's own when it is the one read."""
        preset = {} if self.model_path else embedded_verifier(self.embedded).engine_args()
        return {**preset, **self.engine_args}

    def get_backend(self) -> VerifierBackend:
        return verifier_backend(self.backend)

    def layer_ids(self) -> list[int]:
        """Aux ids (configured or default) followed by the final layer id."""
        return self.get_backend().capture_layer_ids(self.resolved_model_path(), self.aux_layer_ids or None)

    def extraction_devices(self) -> list[str]:
        """The device of each extraction worker (see ``devices``)."""
        return resolve_devices(self.devices, self.device, self.get_backend())

    def identity(self) -> str:
        return self.get_backend().identity(self.resolved_model_path())


def resolve_devices(
    devices: Sequence[str], device: str, backend: VerifierBackend, cuda_count: int | None = None
) -> list[str]:
    """The device of each extraction worker.

    ``[]`` or ``["auto"]``: one worker per visible CUDA GPU when ``device`` allows any GPU
    (``auto``/``cuda``), there are several and the backend is data parallel; otherwise one
    in-process extraction on ``device``. An explicit list (``["cuda:0", "cuda:1"]``, ``["cpu", "cpu"]``)
    is taken as given after validation.
    """
    if cuda_count is None:
        import torch

        cuda_count = torch.cuda.device_count()
    devices = list(devices)
    if devices in ([], [AUTO]):
        if backend.data_parallel and device in (AUTO, "cuda") and cuda_count > 1:
            return [f"cuda:{i}" for i in range(cuda_count)]
        return [device]
    problems = []
    for entry in devices:
        match = _CUDA.fullmatch(entry)
        if entry != "cpu" and not match and not (entry == "cuda" and len(devices) == 1):
            problems.append(f"{entry!r} is not a device: use 'cpu' or 'cuda:N' (or ['auto'] alone)")
        elif match and int(match.group(1)) >= cuda_count:
            problems.append(f"{entry!r} is not visible: this host shows {cuda_count} CUDA device(s)")
    if len(devices) > 1 and not backend.data_parallel:
        problems.append(
            f"backend {backend.name!r} cannot run one worker per device (it spreads one verifier over the "
            "GPUs itself, or extracts through a server): set verifier.devices to [] or one device"
        )
    if problems:
        raise ValueError(f"verifier.devices {devices}: " + "; ".join(problems))
    return devices
