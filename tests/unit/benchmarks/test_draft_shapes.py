"""The training benchmarks' verifier presets: the sizes they resolve to and the FLOPs their MFU counts."""

import pytest
from speculators.train.cli import create_transformer_layer_config

from benchmarks.draft_shapes import (
    PRESETS,
    draft_matmul_params,
    layer_ids,
    muon_matrices,
    resolved_sizes,
    verifier_config,
)
from tests.helpers.drafts import eagle3_draft


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "kimi-k2.5"])
def test_large_presets_resolve_to_the_projects_training_defaults(preset):
    # 1024 prompt allowance + 8192 generation budget; speculators' 32000 under half of either vocabulary.
    assert resolved_sizes(preset) == (32000, 9216)


def test_kimi_preset_captures_the_default_aux_layers_and_the_final_one():
    assert layer_ids("kimi-k2.5") == [2, 30, 58, 61]
    assert layer_ids("llama-3.1-8b") == [2, 16, 29, 32]


@pytest.mark.parametrize("preset", PRESETS)
def test_counted_draft_weights_follow_the_draft_speculators_builds(preset, tmp_path):
    config = verifier_config(preset)
    config.save_pretrained(tmp_path)
    layer = create_transformer_layer_config(str(tmp_path), 1, "llama", None, 0, [0])
    h, heads, head_dim, kv = layer.hidden_size, layer.num_attention_heads, layer.head_dim, layer.num_key_value_heads
    attention = 2 * h * (heads + 2 * kv) * head_dim + heads * head_dim * h
    expected = 3 * h * h + attention + 3 * h * layer.intermediate_size + 1000 * h
    assert draft_matmul_params(config, 1000) == expected


def test_kimi_draft_layer_is_64_heads_of_64():
    config = verifier_config("kimi-k2.5")
    assert (config.hidden_size, config.num_attention_heads, config.head_dim) == (7168, 64, 64)


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match=r"llama-3\.1-8b"):
        verifier_config("llama-70b")


@pytest.mark.parametrize("preset", ["tiny", "tiny-kimi"])
def test_muon_matrices_are_the_weights_speculators_gives_muon(preset, tmp_path):
    from speculators.train.optimizers import split_named_params_for_muon

    config = verifier_config(preset)
    config.save_pretrained(tmp_path)
    layer = create_transformer_layer_config(str(tmp_path), 1, "llama", None, 0, [0])
    draft = eagle3_draft(layer, 64, "LlamaForCausalLM")
    muon, _ = split_named_params_for_muon(draft)
    built = {name.removesuffix(".weight").rsplit(".", 1)[-1]: tuple(p.shape) for name, p in muon}
    assert built == muon_matrices(config)
