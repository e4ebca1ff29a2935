"""GPU throughputs this project measured (the rows of docs/benchmarks.md), and their scaling to other shapes.

A figure measured on one shape is carried to another by FLOPs per token at the same model FLOP
utilisation; the label says so, because an MoE verifier at TP 8 (Kimi-K2.5) will not reach a dense 8B
model's utilisation on one GPU, so a scaled figure is optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_assets.capacity.shapes import LLAMA_3_1_8B, ModelShape

REFERENCE_SHAPE = ModelShape(name="llama-3.1-8b", config=LLAMA_3_1_8B, aux_layer_ids=(2, 16, 29))


@dataclass(frozen=True)
class Measured:
    """A tokens/s figure of one GPU, what it was measured on, and where it is recorded."""

    tokens_per_s: float
    row_tokens: int
    source: str


EXTRACTION = Measured(
    tokens_per_s=27_792,
    row_tokens=1280,  # rows uniform in 512..2048 tokens: 1280 on average
    source="benchmark 'hidden-state extraction, one H200' (benchmarks/hidden_states_gpu.py: "
    "Llama-3.1-8B shape, bf16, rows of 512-2048 tokens, layers [2,16,29]+32 written with sha256+fsync; "
    "median of 3)",
)
TRAINING = Measured(
    tokens_per_s=44_306,
    row_tokens=8192,
    source="benchmark 'draft training, one H200, ours vs speculators train' (benchmarks/train_gpu.py: "
    "draft of an 8B-shaped verifier, draft vocab 32000, ttt 3, 8192-token rows; median of 3)",
)
REFERENCE_DRAFT_VOCAB = 32_000  # the training row's; resolve_settings' default is min(32000, vocab // 2)


@dataclass(frozen=True)
class Rate:
    tokens_per_s: float
    source: str


def extraction_rate(shape: ModelShape, mean_seq_tokens: float) -> Rate:
    """Extraction tokens/s per GPU for ``shape`` at rows of ``mean_seq_tokens``."""
    ref = REFERENCE_SHAPE.forward_flops_per_token(EXTRACTION.row_tokens)
    own = shape.forward_flops_per_token(mean_seq_tokens)
    return _scaled(EXTRACTION, ref, own, shape, "forward FLOPs/token", f"{ref / 1e9:.1f} -> {own / 1e9:.2f} GFLOP")


def training_rate(shape: ModelShape, draft_vocab: int) -> Rate:
    """Draft-training tokens/s per GPU for a draft of ``shape`` with a ``draft_vocab`` head."""
    ref = REFERENCE_SHAPE.draft_train_flops_per_token(REFERENCE_DRAFT_VOCAB)
    own = shape.draft_train_flops_per_token(draft_vocab)
    return _scaled(TRAINING, ref, own, shape, "draft training FLOPs/token", f"{ref / 1e9:.2f} -> {own / 1e9:.3f} GFLOP")


def _scaled(measured: Measured, ref_flops: float, own_flops: float, shape: ModelShape, what: str, numbers: str) -> Rate:
    if shape.config == REFERENCE_SHAPE.config and abs(own_flops - ref_flops) / ref_flops < 0.02:
        return Rate(measured.tokens_per_s, f"measured: {measured.source}")
    rate = measured.tokens_per_s * ref_flops / own_flops
    return Rate(
        rate,
        f"{measured.tokens_per_s:,.0f} tok/s scaled by {what} ({numbers}), same MFU assumed "
        f"(optimistic for MoE at TP 8); from {measured.source}",
    )
