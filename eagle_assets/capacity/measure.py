"""Token statistics for the capacity plan: measured from the materialized partitions where they exist
(prompt counts and splits, sample lengths of ok rows, bytes per token of each table), assumed otherwise,
with the source said either way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.layout import TRAIN, prompts_file, samples_folder, sequences_file
from eagle_assets.core.shards import latest_rows, shard_paths

# Assumed when nothing is materialized: ~3K tokens per regenerated reasoning sample.
ASSUMED_PROMPT_TOKENS = 300
ASSUMED_COMPLETION_TOKENS = 2700
ASSUMED_TRAIN_SHARE = 0.8  # the prompts asset's default split: 10 % validation + 10 % held out


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
        shards = shard_paths(samples_folder(root, partition))
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
