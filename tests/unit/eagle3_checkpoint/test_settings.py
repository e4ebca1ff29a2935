"""Training settings resolved from the verifier's shape and speculators' recipe, unless set."""

from __future__ import annotations

import json

KIMI_TEXT_CONFIG = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
}


def test_training_defaults_resolve_from_a_kimi_shaped_verifier(tmp_path):
    from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings
    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND

    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "kimi_k25", "text_config": KIMI_TEXT_CONFIG, "vision_config": {"hidden_size": 1152}})
    )
    shape = VerifierShape.of(KIMI_BACKEND.text_config(tmp_path))
    assert shape == VerifierShape(vocab_size=163840, context_length=262144)
    settings, resolved = resolve_settings(TrainingSettings(), shape)  # speculators' recipe, read from speculators
    assert settings.total_seq_len >= 8192  # a whole 8K-token reasoning sample fits one row
    assert settings.draft_vocab_size == 32000 and settings.lr == 1e-3
    assert set(resolved) == {"total_seq_len", "draft_vocab_size", "lr"}
    assert "speculators' 32000" in resolved["draft_vocab_size"]


def test_training_defaults_for_the_tiny_verifier_and_explicit_settings(quick_tiny_verifier):
    from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings
    from eagle_assets.plugins.transformers_backend import TRANSFORMERS_BACKEND

    recipe = {"lr": 1e-3, "total_seq_len": 8192, "draft_vocab_size": 32000}
    shape = VerifierShape.of(TRANSFORMERS_BACKEND.text_config(quick_tiny_verifier))
    settings, _ = resolve_settings(TrainingSettings(), shape, recipe)
    assert settings.draft_vocab_size == shape.vocab_size // 2 < 32000  # a 1K vocabulary: half of it, not 32K
    assert settings.total_seq_len <= shape.context_length
    # A short-context verifier: rows never exceed what it can attend to.
    short, _ = resolve_settings(TrainingSettings(), VerifierShape(vocab_size=128256, context_length=4096), recipe)
    assert short.total_seq_len == 4096 and short.draft_vocab_size == 32000
    # Explicit settings win, and nothing is reported as resolved.
    demo = TrainingSettings(total_seq_len=512, draft_vocab_size=256, lr=3e-3)
    assert resolve_settings(demo, shape, recipe) == (demo, {})
