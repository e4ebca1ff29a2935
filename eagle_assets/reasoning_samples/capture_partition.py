"""One partition of ``reasoning_samples``: its recipe's sample set (:mod:`.sample_sets`), which prompts (turns)
still need a sample there, capturing them from the server, and the set's samples classified and counted; no
Dagster here, the asset wires it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash
from eagle_assets.core.layout import SPLITS
from eagle_assets.core.tables import table_version
from eagle_assets.prompts.splits import MissingPrompts
from eagle_assets.reasoning_samples.capture import CaptureReport, capture
from eagle_assets.reasoning_samples.draft import Draft, check_draft_verifier
from eagle_assets.reasoning_samples.engine import ClientSettings
from eagle_assets.reasoning_samples.quality import QualityRules
from eagle_assets.reasoning_samples.recipe import Recipe, ServedVerifier
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.sample_sets import ChangedSettings, open_sample_set
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import (
    VERSIONED_COLUMNS,
    done_prompt_ids,
    done_turns,
    load_samples,
    with_classes,
    write_quality,
)
from eagle_assets.reasoning_samples.summary import (
    capture_counts,
    error_examples,
    quality_counts,
    quality_examples,
    quality_line,
    sample_counts,
    variant_ok_samples,
)
from eagle_assets.reasoning_samples.turns import Conversation, pending_conversations, turn_count
from eagle_assets.reasoning_samples.variants import SamplingVariant, assign_variant

# (prompt_id, messages, split) of a selected prompt
PromptRow = tuple[str, list[dict], str]


@dataclass(frozen=True)
class CaptureSettings:
    """What to ask for and how to store it (the asset's config fields of the same meaning)."""

    splits: Sequence[str] = SPLITS
    turns: str = "last"  # "last" | "all": see ReasoningSamplesConfig.turns
    sampling: Sampling = field(default_factory=Sampling)
    variants: Sequence[SamplingVariant] = ()
    rules: QualityRules = field(default_factory=QualityRules)
    rows_per_shard: int = 256
    flush_interval_s: float = 30.0
    progress_interval_s: float = 5.0

    def recipe(self, verifier: ServedVerifier) -> Recipe:
        return Recipe.of(verifier, self.sampling, self.variants, self.turns)


@dataclass(frozen=True)
class CapturedPartition:
    """The partition's samples after a capture, with what the asset reports about them."""

    folder: Path  # the recipe's sample set
    recipe: Recipe
    other_recipes_rows: dict[str, int]  # the partition's other sample sets: recipe id -> rows stored
    samples: pa.Table  # the latest row per selected prompt (turn), with its quality class
    counts: dict  # sample_counts, then capture_counts: metadata numbers, in the order reported
    quality: dict  # quality/<class>, quality/<class>_share, quality/non_ok_share
    quality_examples: str  # Markdown table
    variant_ok_samples: dict[str, int]  # empty without variants
    error_examples: list[str]
    data_version: str  # content hash of the recipe id and the samples' VERSIONED_COLUMNS
    draft: Draft | None = None  # the draft this capture's server speculated with
    draft_rows: int = 0  # of the samples, those a speculating server answered (their ``draft`` is set)


def read_prompts(path: Path, partition: str, splits: Sequence[str]) -> pa.Table:
    """``prompt_id``, ``messages`` and ``split`` of the prompts in ``splits`` (the split as the table says now)."""
    if not Path(path).exists():
        raise MissingPrompts(
            f"no prompts for partition {partition!r} at {path}: materialize the `prompts` asset "
            "for this partition first."
        )
    table = pq.read_table(path, columns=["prompt_id", "messages", "split"])
    return table.filter(pc.is_in(table["split"], pa.array(list(splits))))


def _variant_sampling(prompt_id: str, variants: Sequence[SamplingVariant], sampling: Sampling) -> Sampling | None:
    variant = assign_variant(prompt_id, variants)
    return None if variant is None else variant.sampling(sampling)


def pending_requests(
    rows: Sequence[PromptRow], folder: Path, settings: CaptureSettings
) -> tuple[list[PromptRequest] | list[Conversation], int]:
    """What is still to ask (prompts, or conversations from their first turn without an ok sample) and how
    many requests the rows make in all (prompts, or turns with ``turns: all``)."""
    variants, sampling = settings.variants, settings.sampling
    if settings.turns == "all":
        todo = [
            replace(c, sampling=_variant_sampling(c.prompt_id, variants, sampling))
            for c in pending_conversations(rows, done_turns(folder))
        ]
        return todo, sum(turn_count(messages) for _, messages, _ in rows)
    done = done_prompt_ids(folder)
    todo = [
        PromptRequest(pid, messages, split, _variant_sampling(pid, variants, sampling))
        for pid, messages, split in rows
        if pid not in done
    ]
    return todo, len(rows)


def _log_plan(
    log: logging.Logger, partition: str, rows: int, selected: int, todo: list, settings: CaptureSettings
) -> None:
    splits = list(settings.splits)
    if settings.turns == "all":
        to_ask = sum(c.turns_left for c in todo)
        log.info(
            f"{partition}: {rows} conversations ({selected} turns) in splits {splits}, "
            f"{selected - to_ask} turns already captured, {to_ask} to capture in {len(todo)} conversations"
        )
    else:
        log.info(
            f"{partition}: {rows} prompts in splits {splits}, {rows - len(todo)} already captured, "
            f"{len(todo)} to capture"
        )


def capture_partition(
    prompts_path: Path,
    partition_folder: Path,
    partition: str,
    settings: CaptureSettings,
    client: ClientSettings,
    serve: Callable[[], AbstractContextManager[Sequence[str]]],
    log: logging.Logger,
    *,
    verifier: ServedVerifier,
    on_changed_settings: ChangedSettings = "refuse",
    draft: Draft | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> CapturedPartition:
    """Capture a sample for every selected prompt (turn) of ``prompts_path`` without an ok one in the sample
    set of the recipe (``verifier`` and ``settings``) under ``partition_folder``.

    The set is opened (and made current) first: :class:`~.sample_sets.SettingsChanged` stops here, before
    anything is written, when ``on_changed_settings`` refuses a change. ``serve()`` is entered only when
    something is left to ask and yields the server's base URLs (its errors propagate; the rows finished
    before them stay in the set). ``draft`` is the draft that server speculates with: refused
    (:class:`~.draft.DraftError`) before anything else when it was trained for another verifier, named by each
    row captured (not part of the recipe: :mod:`.draft`). Every row of the set is then classified by
    ``settings.rules`` (its quality file: token_sequences reads them all); the result holds the selected
    prompts' rows. ``transport`` replaces the HTTP client's (a test's scripted server).
    """
    if draft is not None:
        check_draft_verifier(draft, verifier)
    prompts = read_prompts(prompts_path, partition, settings.splits)
    sample_set = open_sample_set(partition_folder, settings.recipe(verifier), on_changed_settings)
    folder, recipe_id = sample_set.folder, sample_set.recipe.recipe_id
    rows = list(zip(prompts["prompt_id"].to_pylist(), prompts["messages"].to_pylist(), prompts["split"].to_pylist()))
    todo, selected = pending_requests(rows, folder, settings)
    log.info(f"{partition}: sample set {folder} (recipe {recipe_id})")
    if draft is not None:
        log.info(f"{partition}: the server speculates with {draft.path} (K={draft.num_speculative_tokens})")
    _log_plan(log, partition, len(rows), selected, todo, settings)

    report: CaptureReport | None = None
    wall_s = 0.0
    if todo:
        started = time.monotonic()
        with serve() as base_urls:
            report = capture(
                base_urls,
                todo,
                folder,
                settings.sampling,
                client,
                log.info,
                rows_per_shard=settings.rows_per_shard,
                flush_interval_s=settings.flush_interval_s,
                progress_interval_s=settings.progress_interval_s,
                label=f"reasoning_samples[{partition}]",
                transport=transport,
                recipe=recipe_id,
                draft=draft.as_json() if draft is not None else None,
            )
        wall_s = time.monotonic() - started

    samples = load_samples(folder)
    samples = with_classes(samples, write_quality(folder, samples, settings.rules))
    samples = samples.filter(pc.is_in(samples["prompt_id"], prompts["prompt_id"]))
    quality = quality_counts(samples)
    errors = error_examples(samples)
    log.info(f"{partition}: quality " + quality_line(quality))
    for message in errors:
        log.warning(message)
    return CapturedPartition(
        folder=folder,
        recipe=sample_set.recipe,
        other_recipes_rows=sample_set.other_recipes_rows,
        samples=samples,
        counts={
            **sample_counts(samples, len(rows), selected),
            **capture_counts(report, wall_s, verifier.reasoning_parser),
        },
        quality=quality,
        quality_examples=quality_examples(samples),
        variant_ok_samples=variant_ok_samples(samples, settings.variants),
        error_examples=errors,
        data_version=combined_hash([recipe_id, table_version(samples, VERSIONED_COLUMNS)])[:16],
        draft=draft,
        draft_rows=samples.num_rows - samples["draft"].null_count,
    )
