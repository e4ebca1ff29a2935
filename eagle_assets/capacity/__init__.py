"""Capacity planning: disk bytes and GPU-hours per pipeline stage, from a verifier shape and token counts."""

from eagle_assets.capacity.measure import TokenStats, assumed_token_stats, measure_token_stats
from eagle_assets.capacity.plan import (
    BF16,
    DEFAULT_SCRATCH_CAP_GB,
    FP8,
    ONLINE,
    STORED,
    CapacityPlan,
    asset_plan_metadata,
    build_plan,
    feature_bytes,
    feature_bytes_per_token,
    stage_metadata,
)
from eagle_assets.capacity.printout import plan_lines
from eagle_assets.capacity.shapes import PRESETS, ModelShape, ShapeError, load_shape, shape_of

__all__ = [
    "BF16",
    "DEFAULT_SCRATCH_CAP_GB",
    "FP8",
    "ONLINE",
    "PRESETS",
    "STORED",
    "CapacityPlan",
    "ModelShape",
    "ShapeError",
    "TokenStats",
    "asset_plan_metadata",
    "assumed_token_stats",
    "build_plan",
    "feature_bytes",
    "feature_bytes_per_token",
    "load_shape",
    "measure_token_stats",
    "plan_lines",
    "shape_of",
    "stage_metadata",
]
