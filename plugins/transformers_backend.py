"""The ``transformers`` verifier backend: hidden states from a Hugging Face model on CPU or one GPU
(the extraction itself is :mod:`eagle_assets.plugins.transformers_extraction`).

Why it is built this way:

* Forward hooks on the captured decoder layers only (not ``output_hidden_states=True``, which keeps
  every layer alive and, in transformers 5, replaces the last entry by the *post*-norm state). The
  final id ``n`` is the last decoder layer's output, i.e. the state before the final norm, as vLLM
  and speculators define it.
* Batches are bucketed by length (longest first, at most ``batch_tokens`` padded tokens) and padded
  on the right with no attention mask: under causal attention padding never reaches the real
  tokens, and SDPA keeps its fused causal kernel.
* The device→host copy is the bottleneck once the forward is fast (an 8B model makes ~1 GB/s of
  features). The hooks write into a device capture buffer; a side stream copies it into a pinned
  host buffer while the next batch runs, and writer threads hand per-sample views to the sink.
  Buffers are pooled, so a slow sink throttles the GPU instead of growing memory.
* fp8 storage (``feature_dtype="fp8"``): the captured batch is quantized on the device with
  hs-connectors' ``quantize_tensor_to_fp8`` (per-token scales), so half the bytes cross to the host
  and the writer threads do no quantizing; the files are the ones the sink would have quantized.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.backends import ExtractionRequest, Sink, VerifierBackend
from eagle_assets.plugins.transformers_extraction import HiddenStateExtractor, resolve_device, resolve_dtype


@dataclass
class TransformersBackend(VerifierBackend):
    """Hugging Face transformers on CPU or one GPU per worker (the default; the embedded tiny verifier uses it)."""

    data_parallel: bool = True

    def load_model(self, model_path: str | Path, device: str = "auto", dtype: str = "auto"):
        """The decoder without its LM head (extraction needs no logits), on ``device``.

        Loaded as the causal LM the checkpoint was saved as, then only its decoder is kept: a headless
        class (AutoModel) does not expect the checkpoint's `lm_head.weight` and transformers prints a LOAD
        REPORT calling it UNEXPECTED on every load. The head is read into host memory and dropped before
        the decoder moves to ``device``.
        """
        from transformers import AutoModel, AutoModelForCausalLM

        device = resolve_device(device)
        kwargs = dict(
            dtype=resolve_dtype(dtype, device), trust_remote_code=self.trust_remote_code, attn_implementation="sdpa"
        )
        try:
            causal_lm = AutoModelForCausalLM.from_pretrained(str(model_path), **kwargs)
        except ValueError:
            # No causal-LM class for this config (a multimodal wrapper such as Kimi-K2.5's kimi_k25): its
            # headless AutoModel class is what transformers offers.
            return AutoModel.from_pretrained(str(model_path), **kwargs).to(device).eval()
        return causal_lm.get_decoder().to(device).eval()

    def extract(self, model_path, request: ExtractionRequest, sink: Sink, progress=None) -> None:
        model = self.load_model(model_path, request.device, request.dtype)
        extractor = HiddenStateExtractor(
            model,
            self.num_layers(model_path),
            self.hidden_size(model_path),
            request.layer_ids,
            batch_tokens=request.batch_tokens,
            feature_dtype=request.feature_dtype,
        )
        extractor.run(request.sequences, sink, progress)


TRANSFORMERS_BACKEND = TransformersBackend(
    name="transformers",
    description="Hugging Face transformers on CPU or one GPU: forward hooks on the captured layers, "
    "length-bucketed bf16 batches, device-to-host copies overlapped with the next batch.",
)


@hookimpl
def register_verifier_backends(register):
    register(TRANSFORMERS_BACKEND)
