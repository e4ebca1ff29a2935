"""The capacity plan: hand-computed bytes on known configs, the hs-connectors FP8 layout, measured
token statistics from a materialized partition, and `eagle-assets plan` for Kimi-K2.5."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from eagle_assets.capacity import (
    BF16,
    FP8,
    ShapeError,
    assumed_token_stats,
    build_plan,
    feature_bytes,
    feature_bytes_per_token,
    load_shape,
    measure_token_stats,
)
from eagle_assets.capacity.plan import FILE_OVERHEAD_BYTES
from eagle_assets.cli import app
from eagle_assets.core.layout import TRAIN, prompts_file

runner = CliRunner()


def test_feature_bytes_on_a_known_nested_config(tmp_path):
    # A multimodal-style config: the decoder's sizes live under text_config.
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "wrapper",
                "text_config": {
                    "hidden_size": 64,
                    "num_hidden_layers": 8,
                    "vocab_size": 1000,
                    "intermediate_size": 128,
                    "num_attention_heads": 4,
                },
            }
        )
    )
    shape = load_shape(str(tmp_path))
    assert shape.layer_ids == [2, 4, 5, 8]  # [2, n//2, n-3] + final
    assert feature_bytes_per_token(4, 64, BF16) == 4 * 64 * 2 + 8 == 520
    assert feature_bytes_per_token(4, 64, FP8) == 4 * 64 + 4 + 8 == 268
    # 10 samples of 20 + 80 tokens: 1000 tokens, 10 files of 512 header bytes each.
    plan = build_plan(shape, assumed_token_stats(10, prompt_tokens=20, completion_tokens=80), tmp_path)
    hidden = plan.stage("hidden_states")
    assert (
        (hidden.bytes_bf16, hidden.bytes_fp8) == (1000 * 520 + 10 * 4096, 1000 * 268 + 10 * 4096) == (560_960, 308_960)
    )
    assert plan.fits(BF16) and plan.free_bytes > 0


def test_presets_match_the_measured_and_published_shapes():
    llama = load_shape("llama-3.1-8b")
    assert llama.layer_ids == [2, 16, 29, 32]
    assert feature_bytes_per_token(4, 4096) == 32_776  # "32 KB/token for an 8B verifier" (docs/assets.md)
    # FIELD_NOTES: 14.5 GFLOP/token for the 8B forward at 2048-token rows.
    assert llama.forward_flops_per_token(2048) == pytest.approx(14.5e9, rel=0.01)
    kimi = load_shape("kimi-k2.5")
    assert (kimi.hidden_size, kimi.num_layers, kimi.vocab_size, kimi.layer_ids) == (7168, 61, 163840, [2, 30, 58, 61])
    # Kimi-K2 class: ~32B activated parameters with embedding and lm_head.
    assert 31e9 < kimi.active_matmul_params() + 2 * kimi.vocab_size * kimi.hidden_size < 34e9
    assert load_shape("tiny").layer_ids == [1, 2, 3, 4]
    with pytest.raises(ShapeError, match="neither a preset"):
        load_shape("no-such-verifier")


def test_fp8_bytes_are_hs_connectors_format():
    """The plan's fp8 bytes are exactly the tensors hs-connectors' quantizer produces."""
    import torch
    from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8
    from safetensors.torch import save

    seq, layers, hidden = 37, 4, 64
    states, scales = quantize_tensor_to_fp8(torch.randn(seq, layers, hidden, dtype=torch.bfloat16))
    tensors = {"hidden_states": states, SCALES_KEY: scales, "token_ids": torch.arange(seq, dtype=torch.int64)}
    assert sum(t.numel() * t.element_size() for t in tensors.values()) == seq * feature_bytes_per_token(
        layers, hidden, FP8
    )
    assert len(save(tensors)) <= feature_bytes(seq, 1, layers, hidden, FP8)


def test_plan_prints_kimi_totals_for_100k_prompts():
    result = runner.invoke(app, ["plan", "--verifier", "kimi-k2.5", "--prompts", "100000"])
    assert result.exit_code == 0, result.output
    # 100K samples x 3,000 tokens (assumed) x 57,352 | 28,684 B/token + 4 KiB per file (the padded header).
    assert "tokens assumed" in result.output
    assert "hidden_states            17.21 TB       8.61 TB" in result.output
    assert "total                    17.22 TB       8.62 TB" in result.output
    data = json.loads(runner.invoke(app, ["plan", "--verifier", "kimi-k2.5", "--prompts", "100000", "--json"]).output)
    hidden = next(s for s in data["stages"] if s["stage"] == "hidden_states")
    assert hidden["bytes_bf16"] == 300_000_000 * 57_352 + 100_000 * FILE_OVERHEAD_BYTES
    assert hidden["bytes_fp8"] == 300_000_000 * 28_684 + 100_000 * FILE_OVERHEAD_BYTES
    assert (
        "benchmark 'hidden-state extraction, one H200'" in hidden["gpu_hours_source"]
        and "scaled by forward FLOPs" in hidden["gpu_hours_source"]
    )


def test_plan_without_a_count_is_a_clear_error():
    result = runner.invoke(app, ["plan", "--verifier", "kimi-k2.5"])
    assert result.exit_code == 2 and "--prompts N or --partition P" in result.output


def test_token_statistics_are_measured_from_a_materialized_partition(quick_tiny_verifier, storage_root):
    from transformers import AutoTokenizer

    from tests.helpers.upstream import PARTITION, demo_prompts, sample_row, write_samples

    tokenizer = AutoTokenizer.from_pretrained(quick_tiny_verifier)
    prompts = demo_prompts(storage_root, limit=8)
    rows = [sample_row(p, tokenizer, steps=2) for p in prompts]
    write_samples(storage_root, rows)
    stats = measure_token_stats(storage_root.root, [PARTITION])
    assert stats.prompts == 8 and "measured from reasoning_samples[demo] (8 ok samples" in stats.source
    # The train share is counted on the stored prompts table, the same file the assets read.
    splits = pq.read_table(prompts_file(storage_root.root, PARTITION), columns=["split"])["split"].to_pylist()
    assert (
        stats.train_prompts == splits.count(TRAIN) and f"train split {splits.count(TRAIN)} (measured)" in stats.source
    )
    assert stats.seq_tokens == pytest.approx(sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / 8)
    result = runner.invoke(
        app, ["plan", "--verifier", str(quick_tiny_verifier), "--partition", PARTITION, "--root", storage_root.root]
    )
    assert result.exit_code == 0, result.output
    assert "measured from reasoning_samples[demo]" in result.output and "measured on the stored" in result.output
