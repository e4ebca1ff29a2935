"""Stored vs online features in the capacity plan: hand-computed numbers on the reference shape, the
metadata the training stage records, and `eagle-assets plan` printing both modes side by side."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from eagle_assets.capacity import (
    BF16,
    FP8,
    ONLINE,
    STORED,
    assumed_token_stats,
    build_plan,
    feature_bytes,
    load_shape,
    stage_metadata,
)
from eagle_assets.capacity.plan import EPOCHS
from eagle_assets.capacity.throughput import EXTRACTION, TRAINING
from eagle_assets.cli import app
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, HIDDEN_STATES

runner = CliRunner()


@pytest.fixture
def reference_plan(tmp_path):
    """1,000 samples of 1,280 tokens on the shape both rates were measured on, so they apply unscaled."""
    stats = assumed_token_stats(1000, prompt_tokens=280, completion_tokens=1000)
    return build_plan(load_shape("llama-3.1-8b"), stats, tmp_path, scratch_cap_gb=2)


def test_online_costs_every_epochs_extraction_plus_training_and_the_scratch_cap(reference_plan):
    plan = reference_plan
    extraction = 1_280_000 / EXTRACTION.tokens_per_s / 3600
    training = EPOCHS * 1_024_000 / TRAINING.tokens_per_s / 3600  # the 0.8 train split
    assert plan.stage(HIDDEN_STATES).gpu_hours == pytest.approx(extraction)
    assert plan.stage(EAGLE3_CHECKPOINT).gpu_hours == pytest.approx(training)
    assert plan.gpu_hours(STORED) == pytest.approx(extraction + training)
    assert plan.extraction_gpu_hours(ONLINE) == pytest.approx(EPOCHS * extraction)
    assert plan.gpu_hours(ONLINE) == pytest.approx(EPOCHS * extraction + training)

    hidden_bf16 = feature_bytes(1_280_000, 1000, 4, 4096, BF16)
    assert plan.stage(HIDDEN_STATES).bytes_bf16 == hidden_bf16 == 1_280_000 * 32_776 + 1000 * 4096
    rest = plan.total(BF16) - hidden_bf16
    assert plan.scratch_cap_bytes == 2_000_000_000
    for dtype in (BF16, FP8):  # online keeps no features, so the dtype changes nothing on disk
        assert plan.kept(dtype, ONLINE) == rest
        assert plan.total(dtype, ONLINE) == rest + 2_000_000_000
        assert plan.total(dtype, STORED) == plan.kept(dtype, STORED) == plan.total(dtype)


def test_the_training_stage_records_what_online_would_cost(reference_plan):
    plan = reference_plan
    checkpoint = plan.stage(EAGLE3_CHECKPOINT)
    meta = stage_metadata(plan, EAGLE3_CHECKPOINT)
    assert meta["plan/gpu_hours"] == checkpoint.gpu_hours and meta["plan/bytes_bf16"] == checkpoint.bytes_bf16
    assert meta["plan/online_gpu_hours"] == pytest.approx(checkpoint.gpu_hours + plan.extraction_gpu_hours(ONLINE))
    assert meta["plan/online_disk_bytes"] == checkpoint.bytes_bf16 + 2_000_000_000
    assert not any(key.startswith("plan/online") for key in stage_metadata(plan, HIDDEN_STATES))


def test_a_scratch_cap_that_is_not_positive_is_refused(tmp_path):
    with pytest.raises(ValueError, match="give a positive size"):
        build_plan(load_shape("tiny"), assumed_token_stats(10), tmp_path, scratch_cap_gb=0)


def test_plan_prints_stored_and_online_side_by_side():
    args = ["plan", "--verifier", "kimi-k2.5", "--prompts", "100000", "--scratch-cap-gb", "32"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "features             stored (bf16)  stored (fp8)        online  [6]" in result.output
    # Stored: the stage table's totals; online: 17.16 GB of other stages + the 32 GB cap, extraction x 5.
    assert "disk at the peak          17.22 TB       8.62 TB      49.16 GB" in result.output
    assert "disk after the run        17.22 TB       8.62 TB      17.16 GB" in result.output
    assert "GPU-hours in all              33.8          33.8          88.1" in result.output
    assert "online features" in result.output and "capped at 32.00 GB (--scratch-cap-gb" in result.output
    data = json.loads(runner.invoke(app, [*args, "--json"]).output)
    hidden, checkpoint = (
        next(s for s in data["stages"] if s["stage"] == name) for name in (HIDDEN_STATES, "eagle3_checkpoint")
    )
    online = data["features"][ONLINE]
    assert online["gpu_hours"] == pytest.approx(EPOCHS * hidden["gpu_hours"] + checkpoint["gpu_hours"])
    assert online["peak_bytes"][BF16] == online["kept_bytes"][FP8] + 32_000_000_000
    assert online["kept_bytes"][BF16] == data["total_bytes"][BF16] - hidden["bytes_bf16"]
    assert data["features"][STORED]["peak_bytes"] == data["total_bytes"]
    assert runner.invoke(app, [*args[:-1], "0"]).exit_code == 2
