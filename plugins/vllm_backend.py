"""The ``vllm`` verifier backend: production extraction with vLLM, tensor parallel 8.

vLLM's ``extract_hidden_states`` speculative method runs the verifier's prefill, caches the
requested layers (``eagle_aux_hidden_state_layer_ids``, the final id ``n`` included, pre-norm) in a
cache-only layer, and the ``ExampleHiddenStatesConnector`` KV connector writes one safetensors file
per request (``hidden_states`` [tokens, layers, H], ``token_ids`` [tokens]) whose path comes back
in ``kv_transfer_params["hidden_states_path"]``. Chunked prefill and prefix caching must be off
(a request's states must come from one full prefill).

It needs GPUs (vLLM's connector pins memory on an accelerator): on CPU hosts the engine arguments
and the parsing of the connector's files are what the tests check. MLA verifiers (DeepSeek-V3,
Kimi-K2.x) are reported unsupported by vLLM 0.32's connector unless the capture layer gets its own
KV-cache group; use the transformers backend with ``device_map`` for those until vLLM lifts it.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.backends import ExtractionRequest, SampleTensors, Sink, VerifierBackend

CONNECTOR = "ExampleHiddenStatesConnector"


@dataclass
class VLLMBackend(VerifierBackend):
    """vLLM ``extract_hidden_states`` + hidden-states KV connector (GPU hosts, TP=8 by default)."""

    tensor_parallel_size: int = 8
    max_model_len: int = 32768
    # Sequences per generate() call: enough to keep the engine's batch full, bounded temporary disk.
    chunk_size: int = 512

    def speculative_config(self, layer_ids) -> dict:
        return {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,  # the method's only legal value: it drafts nothing
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}},
        }

    def kv_transfer_config(self, storage_path: str | Path) -> dict:
        return {
            "kv_connector": CONNECTOR,
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": str(storage_path)},
        }

    def engine_kwargs(self, model_path, layer_ids, storage_path) -> dict:
        """Keyword arguments of ``vllm.LLM`` / ``EngineArgs`` for extraction."""
        return {
            "model": str(model_path),
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "trust_remote_code": self.trust_remote_code,
            "speculative_config": self.speculative_config(layer_ids),
            "kv_transfer_config": self.kv_transfer_config(storage_path),
            "enable_chunked_prefill": False,
            "enable_prefix_caching": False,
        }

    def serve_args(self, model_path, layer_ids, storage_path) -> list[str]:
        """The same setup as ``vllm serve`` arguments (for a long-lived extraction server)."""
        import json

        kw = self.engine_kwargs(model_path, layer_ids, storage_path)
        args = [
            "--model", kw["model"],
            "--tensor-parallel-size", str(kw["tensor_parallel_size"]),
            "--max-model-len", str(kw["max_model_len"]),
            "--speculative-config", json.dumps(kw["speculative_config"]),
            "--kv-transfer-config", json.dumps(kw["kv_transfer_config"]),
            "--no-enable-chunked-prefill",
            "--no-enable-prefix-caching",
            "--reasoning-parser", self.reasoning_parser,
        ]
        return args + (["--trust-remote-code"] if self.trust_remote_code else [])

    def read_connector_file(self, path: str | Path, key, expected_ids, num_layers: int,
                            hidden_size: int) -> SampleTensors:
        """Load one file the connector wrote (waiting on its lock until the write is complete),
        check it against the request, and delete it and its lock."""
        import torch
        from safetensors.torch import load_file

        path = str(path)
        lock = path + ".lock"
        if os.path.exists(lock):
            with open(lock) as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)  # the writer holds LOCK_EX until the file is complete
        data = load_file(path)
        missing = {"hidden_states", "token_ids"} - data.keys()
        if missing:
            raise ValueError(f"{path}: connector file lacks {sorted(missing)}; is this an ExampleHiddenStatesConnector file?")
        token_ids = data["token_ids"].to(torch.int64)
        if token_ids.tolist() != list(expected_ids):
            raise ValueError(f"{path}: token_ids differ from the request's input_ids (key {key!r}); "
                             "the server re-tokenized the prompt or prefix caching is on")
        states = data["hidden_states"]
        if tuple(states.shape) != (len(token_ids), num_layers, hidden_size):
            raise ValueError(f"{path}: hidden_states shape {tuple(states.shape)} != "
                             f"{(len(token_ids), num_layers, hidden_size)}; check eagle_aux_hidden_state_layer_ids")
        for leftover in (path, lock):
            Path(leftover).unlink(missing_ok=True)
        return SampleTensors(key, states.to(torch.bfloat16), token_ids)

    def extract(self, model_path, request: ExtractionRequest, sink: Sink, progress=None) -> None:
        """One offline engine; sequences go in chunks as ``max_tokens=1`` prompts of exact token ids,
        and each chunk's connector files are handed to the sink and deleted before the next chunk
        (so the temporary copies never hold more than one chunk on disk)."""
        from vllm import LLM, SamplingParams

        num_layers, hidden = len(request.layer_ids), self.hidden_size(model_path)
        done = tokens = 0
        with tempfile.TemporaryDirectory(prefix="vllm-hidden-states-") as storage:
            llm = LLM(**self.engine_kwargs(model_path, request.layer_ids, storage))
            for start in range(0, len(request.sequences), self.chunk_size):
                chunk = request.sequences[start:start + self.chunk_size]
                prompts = [{"prompt_token_ids": [int(t) for t in ids]} for _, ids in chunk]
                outputs = llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
                for (key, ids), out in zip(chunk, outputs, strict=True):
                    path = (out.kv_transfer_params or {}).get("hidden_states_path")
                    if path is None:
                        raise RuntimeError(f"vLLM returned no hidden_states_path for {key!r}: is the KV connector configured?")
                    sink(self.read_connector_file(path, key, ids, num_layers, hidden))
                    done, tokens = done + 1, tokens + len(ids)
                    if progress is not None:
                        progress(done, tokens)


VLLM_BACKEND = VLLMBackend(
    name="vllm",
    description="vLLM extract_hidden_states + ExampleHiddenStatesConnector, tensor parallel 8 "
    "(GPU hosts only; chunked prefill and prefix caching off).",
)


@hookimpl
def register_verifier_backends(register):
    register(VLLM_BACKEND)
