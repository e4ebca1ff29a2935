"""tiny-kimi's shape: a DeepSeek-V3 text model saved inside a ``kimi_k25`` wrapper, as Kimi-K2.5 ships.

The wrapper is what vLLM and transformers both load without remote code: ``config.json`` with
``model_type: kimi_k25``, ``architectures: [KimiK25ForConditionalGeneration]`` and the decoder's config
nested as ``text_config`` (``model_type: kimi_k2``, as Kimi's own checkpoint says; both libraries map
it to DeepSeek-V3), the decoder's weights under ``language_model.``, and a ``preprocessor_config.json``
whose ``media_proc_cfg`` vLLM's Kimi processor reads at start-up even when vision inputs are off.
There is no vision tower in the weights: the server runs with ``limit_mm_per_prompt={"vision_chunk": 0}``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, PreTrainedModel

from eagle_assets.tiny_verifier.recipe import TinyKimiRecipe

ARCHITECTURE = "KimiK25ForConditionalGeneration"
WEIGHT_PREFIX = "language_model."
MEDIA_PAD = "<|media_pad|>"
# vLLM's Kimi-K2.5 image processor fields (Kimi-K2.5's published values); never used for text.
MEDIA_PROC_CFG = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "temporal_merge_kernel_size": 4,
    "in_patch_limit": 16384,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def text_config(recipe: TinyKimiRecipe, vocab_size: int, pad_id: int, eos_id: int) -> DeepseekV3Config:
    return DeepseekV3Config(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        moe_intermediate_size=recipe.moe_intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_attention_heads,
        kv_lora_rank=recipe.kv_lora_rank,
        q_lora_rank=recipe.q_lora_rank,
        qk_rope_head_dim=recipe.qk_rope_head_dim,
        qk_nope_head_dim=recipe.qk_nope_head_dim,
        v_head_dim=recipe.v_head_dim,
        n_routed_experts=recipe.n_routed_experts,
        num_experts_per_tok=recipe.num_experts_per_tok,
        n_shared_experts=recipe.n_shared_experts,
        first_k_dense_replace=recipe.first_k_dense_replace,
        routed_scaling_factor=recipe.routed_scaling_factor,
        n_group=1,
        topk_group=1,
        # transformers' DeepSeek-V3 router is sigmoid + bias-corrected top-k; vLLM reads these two
        # names (and would default to softmax without them), as Kimi's config.json spells them.
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        num_nextn_predict_layers=0,
        max_position_embeddings=recipe.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )


def wrapper_config(recipe: TinyKimiRecipe, text: dict, media_pad_id: int) -> dict:
    """Kimi-K2.5's top-level config around the decoder's; the media token ids are the tokenizer's."""
    vision = recipe.vision_hidden_size
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "kimi_k25",
        "text_config": {**text, "model_type": "kimi_k2"},
        "vision_config": {
            "hidden_size": vision,
            "intermediate_size": 2 * vision,
            "num_hidden_layers": recipe.vision_layers,
            "num_attention_heads": 2,
        },
        "projection_hidden_size": vision,
        "media_placeholder_token_id": media_pad_id,
        "image_token_id": media_pad_id,
        "video_token_id": media_pad_id,
        "tie_word_embeddings": False,
        "dtype": text.get("dtype", "float32"),
    }


def save_wrapped(model: PreTrainedModel, out_dir: Path, recipe: TinyKimiRecipe, media_pad_id: int) -> None:
    """Write the trained decoder as a Kimi-K2.5 checkpoint: config, ``language_model.*`` weights,
    generation config and the image-processor config."""
    with tempfile.TemporaryDirectory(dir=out_dir) as plain:
        # save_pretrained writes the serving layout (one tensor per routed expert), as vLLM loads it.
        model.save_pretrained(plain)
        weights = load_file(str(Path(plain) / "model.safetensors"))
        text = json.loads((Path(plain) / "config.json").read_text())
        text.pop("architectures", None)
    save_file(
        {WEIGHT_PREFIX + name: tensor for name, tensor in weights.items()},
        str(out_dir / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (out_dir / "config.json").write_text(json.dumps(wrapper_config(recipe, text, media_pad_id), indent=2))
    model.generation_config.save_pretrained(out_dir)
    (out_dir / "preprocessor_config.json").write_text(json.dumps({"media_proc_cfg": MEDIA_PROC_CFG}, indent=2))
