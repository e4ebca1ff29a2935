"""The ``token_sequences`` asset: exact training rows (``input_ids`` + ``loss_mask``) per partition,
and the ``template_drift`` check that catches a chat-template or tokenizer change before training."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import time
from pathlib import Path
from typing import Literal

import dagster as dg
import pyarrow.parquet as pq
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core.checks import check_result
from eagle_assets.core.files import write_json, write_parquet
from eagle_assets.core.layout import PIPELINE, PROMPTS_FILE, SEQUENCES_FILE, SPLITS, TOKENIZATION_FILE
from eagle_assets.core.tables import table_version
from eagle_assets.prompts.splits import read_current_splits
from eagle_assets.reasoning_samples.quality import count_classes
from eagle_assets.reasoning_samples.store import load_classified, load_samples
from eagle_assets.resources import StorageRoot, Verifier
from eagle_assets.token_sequences.build import (
    VERSIONED_COLUMNS,
    DriftReport,
    Policy,
    build_rows,
    measure_drift,
    template_hash,
)

CODE_VERSION = "token_sequences-2"
# Prompts render deterministically: any prompt mismatch means another template or tokenizer.
MAX_PROMPT_MISMATCH_RATE = 0.0
# Completions may legitimately differ (the model sampled a non-canonical tokenization).
WARN_COMPLETION_MISMATCH_RATE = 0.1
DRIFT_SAMPLE_SIZE = 64


class QualityPolicy(dg.Config):
    """Per quality class of `reasoning_samples`: keep the samples, drop them, or (loops) cut them."""

    truncated: Literal["keep", "drop"] = Field(
        default="keep", description="Answer cut at max_tokens: keep (still the verifier's own text) or drop."
    )
    unfinished_thinking: Literal["keep", "drop"] = Field(
        default="keep", description="Thinking never closed (no answer): keep or drop."
    )
    empty_answer: Literal["keep", "drop"] = Field(
        default="keep", description="Nothing after the thinking: keep or drop."
    )
    trivial_reasoning: Literal["keep", "drop"] = Field(
        default="keep", description="Thinking shorter than reasoning_samples' min_thinking_tokens: keep or drop."
    )
    repetition_loop: Literal["keep", "drop", "cut"] = Field(
        default="keep",
        description="A repetition loop: keep, drop, or cut (the completion ends where the loop "
        "starts, unsupervised after that).",
    )


class TokenSequencesConfig(dg.Config):
    """Launchpad settings of the `token_sequences` asset."""

    max_length: int = Field(default=16384, ge=2, description="Longest row kept, in tokens (prompt + completion).")
    overlength_policy: Literal["truncate", "drop"] = Field(
        default="truncate",
        description="Rows longer than max_length: truncate the completion to fit, or drop the row.",
    )
    quality_policy: QualityPolicy = Field(
        default_factory=QualityPolicy,
        description="What becomes of samples per quality class (reasoning_samples classifies them); ok samples "
        "are always kept, errors have no tokens.",
    )
    splits: list[str] = Field(
        default=list(SPLITS),
        description="Prompt splits to turn into rows, as the current prompts table assigns them (train and "
        "validation feed the checkpoint; heldout rows are kept for audits and re-splits).",
    )
    drift_sample_size: int = Field(
        default=DRIFT_SAMPLE_SIZE, ge=0, description="Server-token samples re-rendered locally by the drift check."
    )


def _messages(storage: StorageRoot, partition: str) -> dict[str, list[dict]]:
    path = storage.path("prompts", partition) / PROMPTS_FILE
    if not path.exists():
        return {}
    table = pq.read_table(path, columns=["prompt_id", "messages"])
    return dict(zip(table["prompt_id"].to_pylist(), table["messages"].to_pylist()))


def renderer(verifier: Verifier):
    """(messages, reasoning, content) -> (prompt ids, completion ids) through the verifier's template."""
    backend, path = verifier.get_backend(), verifier.resolved_model_path()
    tokenizer = backend.load_tokenizer(path)
    stops = backend.stop_token_ids(tokenizer, path)

    def render(messages, reasoning, content, template_kwargs=None):
        return backend.render(tokenizer, messages, reasoning, content, stops, template_kwargs)

    return render, tokenizer


def drift_check_result(report: DriftReport) -> dg.AssetCheckResult:
    """Fails (error) on any prompt mismatch, warns on many completion mismatches, saying which and what to do."""
    prompt_ok = report.prompt_mismatch_rate <= MAX_PROMPT_MISMATCH_RATE
    rates = (
        f"of {report.checked} re-rendered samples, {report.prompt_mismatches} prompts "
        f"({report.prompt_mismatch_rate:.1%}, limit {MAX_PROMPT_MISMATCH_RATE:.0%}) and "
        f"{report.completion_mismatches} completions ({report.completion_mismatch_rate:.1%}, warning above "
        f"{WARN_COMPLETION_MISMATCH_RATE:.0%}) differ from the server's tokens"
    )
    return check_result(
        prompt_ok and report.completion_mismatch_rate <= WARN_COMPLETION_MISMATCH_RATE,
        {
            **report.metadata(),
            "examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in report.examples[:10]) or "none"),
        },
        check_name="template_drift",
        severity=dg.AssetCheckSeverity.ERROR if not prompt_ok else dg.AssetCheckSeverity.WARN,
        failed=rates,
        fix="point verifier.model_path at the folder that served the samples (its chat template or tokenizer "
        "differs), or re-materialize reasoning_samples with the current verifier"
        if not prompt_ok
        else "some sampled completions tokenize differently when re-encoded (a few are normal); if many, use the "
        "server's tokenizers/transformers versions here: rows rendered without server tokens would differ",
    )


def build(partitions: dg.PartitionsDefinition) -> dict:
    @dg.asset(
        name="token_sequences",
        partitions_def=partitions,
        deps=["reasoning_samples", "prompts"],
        group_name=PIPELINE,
        kinds={"python", "parquet"},
        code_version=CODE_VERSION,
    )
    def token_sequences(
        context: dg.AssetExecutionContext, config: TokenSequencesConfig, storage: StorageRoot, verifier: Verifier
    ) -> dg.MaterializeResult:
        """Training rows of one partition: the verifier's exact prompt + completion tokens, with a loss
        mask of 0 on the prompt and 1 on the thinking, answer and stop token.

        Server token ids are used as they are; samples without them are rendered through the
        verifier's chat template. Error rows, other splits and (by policy) overlong samples or
        samples of a quality class (`quality_policy`) are counted by reason, never silently lost.
        """
        partition = context.partition_key
        started = time.monotonic()
        samples, rules = load_classified(storage.path("reasoning_samples", partition))
        messages = _messages(storage, partition)
        try:
            splits = {pid: split for pid, (split, _) in read_current_splits(storage.root, partition).items()}
        except FileNotFoundError as err:
            raise dg.Failure(description=str(err)) from None
        render, tokenizer = renderer(verifier)
        policy = Policy(
            config.max_length, config.overlength_policy, tuple(config.splits), config.quality_policy.model_dump()
        )
        built = build_rows(samples, messages, splits, render, policy)
        table = built.table()
        folder = storage.path("token_sequences", partition)
        path = write_parquet(table, folder / SEQUENCES_FILE)
        drift = measure_drift(samples, messages, render, config.drift_sample_size)
        version = table_version(table, VERSIONED_COLUMNS)
        write_json(
            {
                "policy": config.model_dump(),
                "quality_rules": rules.as_dict(),
                "verifier": str(verifier.resolved_model_path()),
                "verifier_identity": verifier.identity(),
                "template_hash": template_hash(tokenizer),
                "drift": drift.metadata(),
                "content_hash": version,
            },
            folder / TOKENIZATION_FILE,
        )
        seq_lens = table["seq_len"].to_pylist()
        origins = table["origin"].to_pylist()
        elapsed = time.monotonic() - started
        context.log.info(
            f"{partition}: {table.num_rows} rows from {samples.num_rows} samples "
            f"({sum(seq_lens)} tokens, {sum(seq_lens) / max(elapsed, 1e-9):.0f} tok/s), skipped {dict(built.skipped)}; "
            f"drift: prompt {drift.prompt_mismatch_rate:.1%}, completion {drift.completion_mismatch_rate:.1%} "
            f"of {drift.checked}"
        )
        for example in drift.examples[:5]:
            context.log.warning(f"template drift: {example}")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": table.num_rows,
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
                "template_hash": template_hash(tokenizer),
                "path": dg.MetadataValue.path(str(path)),
                **asset_plan_metadata(storage.root, [partition], "token_sequences"),
            },
            data_version=dg.DataVersion(version),
        )

    @dg.asset_check(
        asset=token_sequences,
        name="template_drift",
        partitions_def=partitions,
        additional_deps=["reasoning_samples", "prompts"],
        description="Re-renders a sample of server-token records with the local chat template and tokenizer; "
        "fails on any prompt mismatch (a changed template/tokenizer), warns when many completions differ.",
    )
    def template_drift(
        context: dg.AssetCheckExecutionContext, storage: StorageRoot, verifier: Verifier
    ) -> dg.AssetCheckResult:
        partition = context.partition_key
        samples = load_samples(Path(storage.path("reasoning_samples", partition)))
        render, _ = renderer(verifier)
        return drift_check_result(measure_drift(samples, _messages(storage, partition), render, DRIFT_SAMPLE_SIZE))

    return {"assets": [token_sequences], "checks": [template_drift]}
