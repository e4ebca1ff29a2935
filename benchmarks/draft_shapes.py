"""Verifier shapes for the draft-training benchmarks (``train_gpu.py``, ``train_step_probe.py``).

A preset gives the verifier config a head-only verifier folder is written from, its captured layers,
and the draft vocabulary and row length the project resolves for it
(:func:`eagle_assets.eagle3_checkpoint.settings.resolve_settings`). The large presets are the capacity
planner's (:mod:`eagle_assets.capacity.shapes`); Kimi-K2.5's config is written as DeepSeek-V3's, so
speculators derives its draft from it exactly as from the real model's ``text_config`` (its ``head_dim``
is the config's ``qk_rope_head_dim``, 64: a draft layer of 64 heads x 64).
"""

from __future__ import annotations

from eagle_assets.capacity.shapes import KIMI_K2_5_TEXT, LLAMA_3_1_8B, load_shape
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings

LLAMA_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# CPU-sized stand-ins of both architectures: the same code paths at a size a laptop trains.
TINY_LLAMA = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
)
TINY_KIMI = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    moe_intermediate_size=64,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=64,
    kv_lora_rank=32,
    qk_nope_head_dim=32,
    qk_rope_head_dim=32,
    v_head_dim=32,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    max_position_embeddings=4096,
)
TINY_SETTINGS = (64, 1024)  # draft vocab, row length: what a CPU trains in seconds
PRESETS = ("llama-3.1-8b", "kimi-k2.5", "tiny", "tiny-kimi")


def verifier_config(preset: str):
    """The transformers config of ``preset``'s verifier (eos id 1 on the tiny ones, the mask token)."""
    from transformers import DeepseekV3Config, LlamaConfig

    if preset == "llama-3.1-8b":
        fields = {k: v for k, v in LLAMA_3_1_8B.items() if k != "model_type"}
        return LlamaConfig(
            **fields, rms_norm_eps=1e-5, rope_parameters=LLAMA_ROPE, tie_word_embeddings=False, eos_token_id=128001
        )
    if preset == "kimi-k2.5":
        fields = {k: v for k, v in KIMI_K2_5_TEXT.items() if k != "model_type"}
        return DeepseekV3Config(**fields, tie_word_embeddings=False, eos_token_id=163585)
    if preset == "tiny":
        return LlamaConfig(**TINY_LLAMA, tie_word_embeddings=False, eos_token_id=1)
    if preset == "tiny-kimi":
        return DeepseekV3Config(**TINY_KIMI, tie_word_embeddings=False, eos_token_id=1)
    raise ValueError(f"unknown shape {preset!r}: choose from {', '.join(PRESETS)}")


def layer_ids(preset: str) -> list[int]:
    """Captured layers: the project's default aux layers, then the final one."""
    if preset.startswith("tiny"):
        return [2, 4, 6, 8]
    return load_shape(preset).layer_ids


def resolved_sizes(preset: str) -> tuple[int, int]:
    """(draft vocabulary, row length) the project's training defaults resolve to for this verifier."""
    if preset.startswith("tiny"):
        return TINY_SETTINGS
    resolved, _ = resolve_settings(TrainingSettings(), VerifierShape.of(verifier_config(preset)))
    return resolved.draft_vocab_size, resolved.total_seq_len


def draft_matrices(config, draft_vocab: int) -> dict[str, tuple[int, int]]:
    """(out, in) of each trained matmul weight of speculators' one-layer EAGLE-3 draft for this verifier:
    fc 3H->H, a Llama layer whose q/k/v read 2H inputs (heads and head_dim resolved as speculators does:
    the config's ``head_dim`` when it has one), its MLP as wide as the verifier's dense one, and the draft
    lm_head. The frozen embedding and the norms are left out."""
    h, heads = config.hidden_size, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    kv = config.num_key_value_heads
    if h % heads and h % head_dim == 0:
        heads = h // head_dim
    mlp = config.intermediate_size
    return {
        "fc": (h, 3 * h),
        "q_proj": (heads * head_dim, 2 * h),
        "k_proj": (kv * head_dim, 2 * h),
        "v_proj": (kv * head_dim, 2 * h),
        "o_proj": (h, heads * head_dim),
        "gate_proj": (mlp, h),
        "up_proj": (mlp, h),
        "down_proj": (h, mlp),
        "lm_head": (draft_vocab, h),
    }


def draft_matmul_params(config, draft_vocab: int) -> int:
    """Trained matmul weights of the draft (:func:`draft_matrices`)."""
    return sum(rows * cols for rows, cols in draft_matrices(config, draft_vocab).values())


def muon_matrices(config) -> dict[str, tuple[int, int]]:
    """The draft's weights speculators' Muon orthogonalizes: every matrix but the lm_head (AdamW's)."""
    return {name: shape for name, shape in draft_matrices(config, 1).items() if name != "lm_head"}


def train_flops_per_token(config, draft_vocab: int, ttt_steps: int = 3) -> float:
    """Forward + backward (6 FLOPs per weight) of the draft's matmuls, unrolled over ``ttt_steps``;
    attention over the row left out, so MFU figures from it are a floor."""
    return 6.0 * ttt_steps * draft_matmul_params(config, draft_vocab)
