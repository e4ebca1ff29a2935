"""The verifier folder training reads: a nested (Kimi-K2.5) config resolved into a plain decoder folder."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from eagle_assets.plugin_manager import verifier_backend


def test_training_gets_a_resolved_decoder_folder_speculators_reads(quick_tiny_kimi, tmp_path):
    from speculators.train.cli import create_transformer_layer_config
    from speculators.utils.loading import load_model_layers

    from eagle_assets.eagle3_checkpoint.verifier_folder import training_verifier

    backend = verifier_backend("kimi")
    resolved = training_verifier(backend, quick_tiny_kimi, tmp_path)
    # made once
    assert resolved != quick_tiny_kimi and training_verifier(backend, quick_tiny_kimi, tmp_path) == resolved
    config = json.loads((resolved / "config.json").read_text())
    assert config["model_type"] == "deepseek_v3" and config["architectures"] == ["DeepseekV3ForCausalLM"]
    draft_layer = create_transformer_layer_config(str(resolved), 1, "llama", None, 2048, [])
    assert draft_layer.hidden_size == backend.hidden_size(quick_tiny_kimi)
    weights = load_model_layers(["embed_tokens.weight", "lm_head.weight", "model.norm.weight"], str(resolved))
    with safe_open(str(quick_tiny_kimi / "model.safetensors"), "pt") as fh:
        assert torch.equal(weights["lm_head.weight"], fh.get_tensor("language_model.lm_head.weight"))
        assert torch.equal(weights["model.norm.weight"], fh.get_tensor("language_model.model.norm.weight"))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert training_verifier(backend, plain, tmp_path) == plain  # a plain decoder is used as it is
