"""One partition of ``token_sequences``: its samples turned into training rows (``sequences.parquet``) with
the tokenization report beside them (``tokenization.json``), and the template drift measured on the way;
no Dagster here, the asset wires it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_assets.core.files import write_json, write_parquet
from eagle_assets.core.layout import SEQUENCES_FILE, TOKENIZATION_FILE
from eagle_assets.core.tables import table_version
from eagle_assets.prompts.splits import read_splits
from eagle_assets.reasoning_samples.quality import count_classes
from eagle_assets.reasoning_samples.store import load_classified, load_samples
from eagle_assets.resources import Verifier
from eagle_assets.token_sequences.build import (
    VERSIONED_COLUMNS,
    DriftReport,
    Policy,
    Renderer,
    build_rows,
    measure_drift,
    template_hash,
)

# Server-token samples the drift check re-renders locally.
DRIFT_SAMPLE_SIZE = 64


@dataclass(frozen=True)
class LocalTemplate:
    """The verifier's chat template and tokenizer as loaded here, and which verifier they come from."""

    render: Renderer
    tokenizer: Any  # what the backend loads; its ``chat_template`` is hashed into the report
    model_path: str
    identity: str


@dataclass(frozen=True)
class TokenizedPartition:
    """What :func:`tokenize_partition` wrote, with the counts the asset reports."""

    table: pa.Table  # the rows of sequences.parquet
    path: Path  # sequences.parquet
    counts: dict  # samples, tokens, ..., skipped_<reason>, drift_*, template_hash: in the order reported
    drift: DriftReport
    data_version: str  # content hash of VERSIONED_COLUMNS (tokenization.json's content_hash)


def renderer(verifier: Verifier):
    """(messages, reasoning, content) -> (prompt ids, completion ids) through the verifier's template."""
    backend, path = verifier.get_backend(), verifier.resolved_model_path()
    tokenizer = backend.load_tokenizer(path)
    stops = backend.stop_token_ids(tokenizer, path)

    def render(messages, reasoning, content, template_kwargs=None):
        return backend.render(tokenizer, messages, reasoning, content, stops, template_kwargs)

    return render, tokenizer


def local_template(verifier: Verifier) -> LocalTemplate:
    render, tokenizer = renderer(verifier)
    return LocalTemplate(render, tokenizer, str(verifier.resolved_model_path()), verifier.identity())


def prompt_messages(prompts_path: Path) -> dict[str, list[dict]]:
    """``prompt_id -> messages`` of the prompts table at ``prompts_path`` ({} while there is none)."""
    if not Path(prompts_path).exists():
        return {}
    table = pq.read_table(prompts_path, columns=["prompt_id", "messages"])
    return dict(zip(table["prompt_id"].to_pylist(), table["messages"].to_pylist()))


def tokenize_partition(
    samples_folder: Path,
    prompts_path: Path,
    folder: Path,
    partition: str,
    policy: Policy,
    load_template: Callable[[], LocalTemplate],
    log: logging.Logger,
    *,
    drift_sample_size: int = DRIFT_SAMPLE_SIZE,
    recorded_policy: Mapping[str, Any] | None = None,
) -> TokenizedPartition:
    """Write ``folder``'s sequences.parquet from the classified samples of ``samples_folder`` and the
    current splits of ``prompts_path``, and tokenization.json (``recorded_policy``, the quality rules,
    the verifier, the template hash, the drift of ``drift_sample_size`` re-rendered samples, the content
    hash).

    ``load_template`` is called once the inputs are read, so a missing prompts table is reported
    (:class:`~eagle_assets.prompts.splits.MissingPrompts`, naming the asset to materialize) before any
    tokenizer is loaded.
    """
    started = time.monotonic()
    samples, rules = load_classified(samples_folder)
    messages = prompt_messages(prompts_path)
    splits = {pid: split for pid, (split, _) in read_splits(prompts_path).items()}
    template = load_template()
    built = build_rows(samples, messages, splits, template.render, policy)
    table = built.table()
    path = write_parquet(table, Path(folder) / SEQUENCES_FILE)
    drift = measure_drift(samples, messages, template.render, drift_sample_size)
    version = table_version(table, VERSIONED_COLUMNS)
    hashed = template_hash(template.tokenizer)
    write_json(
        {
            "policy": dict(recorded_policy or {}),
            "quality_rules": rules.as_dict(),
            "verifier": template.model_path,
            "verifier_identity": template.identity,
            "template_hash": hashed,
            "drift": drift.metadata(),
            "content_hash": version,
        },
        Path(folder) / TOKENIZATION_FILE,
    )
    seq_lens = table["seq_len"].to_pylist()
    origins = table["origin"].to_pylist()
    elapsed = time.monotonic() - started
    log.info(
        f"{partition}: {table.num_rows} rows from {samples.num_rows} samples "
        f"({sum(seq_lens)} tokens, {sum(seq_lens) / max(elapsed, 1e-9):.0f} tok/s), skipped {dict(built.skipped)}; "
        f"drift: prompt {drift.prompt_mismatch_rate:.1%}, completion {drift.completion_mismatch_rate:.1%} "
        f"of {drift.checked}"
    )
    for example in drift.examples[:5]:
        log.warning(f"template drift: {example}")
    counts = {
        "samples": samples.num_rows,
        "tokens": sum(seq_lens),
        "supervised_tokens": built.supervised_tokens,
        "max_seq_len": max(seq_lens, default=0),
        "mean_seq_len": sum(seq_lens) / len(seq_lens) if seq_lens else 0.0,
        "server_tokens_rows": origins.count("server_tokens"),
        "rendered_rows": origins.count("rendered"),
        "cut_to_max_length": built.cut_to_max_length,
        "cut_at_loop": built.cut_at_loop,
        **{f"samples_{name}": n for name, n in count_classes(samples["quality"].to_pylist()).items()},
        **{f"skipped_{reason}": n for reason, n in sorted(built.skipped.items())},
        **drift.metadata(),
        "template_hash": hashed,
    }
    return TokenizedPartition(table, path, counts, drift, version)


def partition_drift(
    samples_folder: Path, prompts_path: Path, render: Renderer, sample_size: int = DRIFT_SAMPLE_SIZE
) -> DriftReport:
    """The template drift of up to ``sample_size`` of ``samples_folder``'s server-token samples."""
    return measure_drift(load_samples(Path(samples_folder)), prompt_messages(prompts_path), render, sample_size)
