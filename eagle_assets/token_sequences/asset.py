"""The ``token_sequences`` asset: exact training rows (``input_ids`` + ``loss_mask``) per partition,
and the ``template_drift`` check that catches a chat-template or tokenizer change before training."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
from typing import Literal

import dagster as dg
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core.layout import PIPELINE, SPLITS, TOKEN_SEQUENCES, asset_folder, prompts_file, samples_folder
from eagle_assets.prompts.splits import MissingPrompts
from eagle_assets.resources import StorageRoot, Verifier
from eagle_assets.token_sequences.build import Policy
from eagle_assets.token_sequences.checks import drift_check_result
from eagle_assets.token_sequences.tokenize_partition import (
    DRIFT_SAMPLE_SIZE,
    MissingSamples,
    WrongTokenizer,
    local_template,
    partition_drift,
    renderer,
    tokenize_partition,
)

CODE_VERSION = "token_sequences-3"


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

        Rows come from the current sample set of `reasoning_samples`; samples generated with another
        tokenizer than the verifier's are refused before anything is written. Server token ids are
        used as they are; samples without them are rendered through the verifier's chat template.
        Error rows, other splits and (by policy) overlong samples or samples of a quality class
        (`quality_policy`) are counted by reason, never silently lost. Each materialization's
        files are a version of their own (`versions/<data version>/`), never rewritten.
        """
        partition = context.partition_key
        policy = Policy(
            config.max_length, config.overlength_policy, tuple(config.splits), config.quality_policy.model_dump()
        )
        try:
            tokenized = tokenize_partition(
                samples_folder(storage.root, partition),
                prompts_file(storage.root, partition),
                asset_folder(storage.root, TOKEN_SEQUENCES, partition),
                partition,
                policy,
                lambda: local_template(verifier),
                context.log,
                drift_sample_size=config.drift_sample_size,
                recorded_policy=config.model_dump(),
            )
        except (MissingPrompts, MissingSamples, WrongTokenizer) as exc:
            raise dg.Failure(description=f"token_sequences[{partition}]: {exc}") from None
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": tokenized.table.num_rows,
                **tokenized.counts,
                "path": dg.MetadataValue.path(str(tokenized.path)),
                **asset_plan_metadata(storage.root, [partition], "token_sequences"),
            },
            data_version=dg.DataVersion(tokenized.data_version),
        )

    @dg.asset_check(
        asset=token_sequences,
        name="template_drift",
        partitions_def=partitions,
        additional_deps=["reasoning_samples", "prompts"],
        # A prompt mismatch means rows the verifier never saw that way: hidden_states must not extract them.
        blocking=True,
        description="Re-renders a sample of server-token records with the local chat template and tokenizer; "
        "fails on any prompt mismatch (a changed template/tokenizer), which keeps hidden_states from running on "
        "the rows; warns when many completions differ.",
    )
    def template_drift(
        context: dg.AssetCheckExecutionContext, storage: StorageRoot, verifier: Verifier
    ) -> dg.AssetCheckResult:
        partition = context.partition_key
        render, _ = renderer(verifier)
        drift = partition_drift(
            samples_folder(storage.root, partition), prompts_file(storage.root, partition), render, DRIFT_SAMPLE_SIZE
        )
        return drift_check_result(drift)

    return {"assets": [token_sequences], "checks": [template_drift]}
