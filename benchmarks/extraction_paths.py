"""The paths ``benchmarks/hidden_states_gpu.py`` times and compares: the random-weight verifier, the sinks
(the asset's writer with deletion, a collecting one for the equivalence checks, a null one), the naive
``output_hidden_states=True`` loop, and the bare forward pass over the extractor's own batches.

Needs the project importable with ``eagle_assets.plugins`` mapped (``hidden_states_gpu.py`` does that first).
"""

from __future__ import annotations

import threading

import torch

from eagle_assets.hidden_states.files import SampleWriter, content_id, dequantized, relative_path
from eagle_assets.plugins.transformers_extraction import bucket_batches


def random_model(config, device: str, dtype):
    """A ``LlamaModel`` with random weights, built on ``device`` in ``dtype``."""
    from transformers import LlamaModel

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the final dtype: an fp32 8B model would take 32 GB first
    try:
        with torch.device(device):
            return LlamaModel(config).eval()
    finally:
        torch.set_default_dtype(default_dtype)


class DeletingWriter(SampleWriter):
    """The asset's sink (checks, safetensors, sha256, fsync, atomic rename), then the file is deleted
    so a long run does not fill the disk; the write cost is what is measured."""

    def __call__(self, sample) -> None:
        super().__call__(sample)
        (self.folder / relative_path(sample.key[1])).unlink()


class CollectingSink:
    """Keeps each sample's tensors (on the host) for the equivalence check."""

    def __init__(self):
        self.samples: dict = {}
        self._lock = threading.Lock()

    def __call__(self, sample) -> None:
        tensors = {"hidden_states": sample.hidden_states.cpu()}
        if sample.scales is not None:  # fp8 from the extractor: compared after hs-connectors' dequantization
            tensors["hidden_states_scales"] = sample.scales.cpu()
        with self._lock:
            self.samples[sample.key] = dequantized(tensors)["hidden_states"].float()


class NullSink:
    """Takes every sample and keeps nothing: the extractor's capture and device-to-host copies alone."""

    def __call__(self, sample) -> None:
        pass


def keyed(sequences, layer_ids):
    return [((i, content_id(ids, "benchmark", layer_ids)), ids) for i, ids in sequences]


def naive_loop(model, sequences, layer_ids, sink, device) -> None:
    """What people write first: every layer kept, the wanted ones stacked, a blocking copy."""
    from eagle_assets.backends import SampleTensors

    with torch.inference_mode():
        for key, ids in sequences:
            out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True, use_cache=False)
            states = torch.stack([out.hidden_states[k][0] for k in layer_ids], dim=1).to(torch.bfloat16).cpu()
            sink(SampleTensors(key, states, torch.tensor(ids, dtype=torch.int64)))


def forward_same_rows(model, sequences, batch_tokens: int, device: str) -> None:
    """The baseline: the model's forward over the extractor's own batches (the same length buckets,
    the same padding, ids copied the same way), with nothing captured, copied back or written."""
    lengths = [len(ids) for _, ids in sequences]
    with torch.inference_mode():
        for batch in bucket_batches(lengths, batch_tokens):
            ids = torch.zeros((len(batch), lengths[batch[0]]), dtype=torch.long)
            for b, i in enumerate(batch):
                ids[b, : lengths[i]] = torch.tensor(sequences[i][1])
            ids = ids.pin_memory().to(device, non_blocking=True) if device == "cuda" else ids
            model(input_ids=ids, use_cache=False)


def fp8_agreement(bf16_extractor, fp8_extractor, sequences) -> float:
    """Worst per-token cosine similarity between the fp8 path's dequantized states and the bf16 path's."""
    bf16, fp8 = CollectingSink(), CollectingSink()
    bf16_extractor.run(sequences, bf16)
    fp8_extractor.run(sequences, fp8)
    return min(
        torch.nn.functional.cosine_similarity(fp8.samples[k], bf16.samples[k], dim=-1).min().item()
        for k, _ in sequences
    )


def compare_paths(model, extractor, sequences, layer_ids, device) -> dict:
    """Worst per-token cosine similarity and worst relative max error between the extractor's states
    (batched, padded) and the naive loop's (one row at a time), over every row, token and layer."""
    fast, naive = CollectingSink(), CollectingSink()
    extractor.run(sequences, fast)
    naive_loop(model, sequences, layer_ids, naive, device)
    norm = model.norm
    worst_cos, worst_rel = 1.0, 0.0
    for key, _ids in sequences:
        ours, ref = fast.samples[key].clone(), naive.samples[key]
        with torch.inference_mode():  # the naive loop's final state is post-norm: compare like with like
            final = norm(ours[:, -1].to(device=device, dtype=next(model.parameters()).dtype))
        ours[:, -1] = final.float().cpu()
        cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
        worst_cos = min(worst_cos, cos.min().item())
        worst_rel = max(worst_rel, ((ours - ref).abs().amax() / ref.abs().amax()).item())
    return {
        "rows": len(sequences),
        "min_token_cosine": round(worst_cos, 5),
        "max_rel_error": round(worst_rel, 4),
        "tensors_match": worst_cos >= 0.999 and worst_rel <= 0.05,
    }
