"""The ``prompts`` asset: one dataset source, validated, de-duplicated, ided and split, as Parquet."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import time

import dagster as dg
import pyarrow as pa
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core.checks import check_result
from eagle_assets.core.files import write_json, write_parquet
from eagle_assets.core.layout import PIPELINE, PROMPTS_FILE, SKIPPED_FILE, SPLITS
from eagle_assets.core.tables import table_version
from eagle_assets.plugin_manager import dataset_source, load_errors
from eagle_assets.prompts.collection import Collection, collect
from eagle_assets.prompts.records import PROMPTS_SCHEMA, SKIP_REASONS
from eagle_assets.prompts.splits import DEFAULT_HELDOUT_FRACTION, DEFAULT_VALIDATION_FRACTION, SplitRule
from eagle_assets.resources import StorageRoot
from eagle_assets.sources import SourceUnavailable

# Bump when the rows this asset writes for the same input would change.
# What downstream depends on: ids, messages (through the id), references, splits, metadata.
VERSIONED_COLUMNS = ("prompt_id", "reference", "split", "group_id", "metadata")
CODE_VERSION = "prompts-2"
EXAMPLES_SHOWN = 20


class PromptsConfig(dg.Config):
    """Launchpad settings of the `prompts` asset."""

    limit: int | None = Field(
        default=None, ge=1, description="Keep at most this many unique prompts (a seeded uniform sample); empty = all."
    )
    seed: int = Field(default=0, description="Seed of the `limit` sample; the same seed keeps the same prompts.")
    heldout_fraction: float = Field(
        default=DEFAULT_HELDOUT_FRACTION,
        ge=0.0,
        lt=1.0,
        description="Share of problem groups in the `heldout` split: only eagle3_eval's reported acceptance "
        "reads it (chosen from a hash of each prompt's group: the row's `group` key, else its normalized text).",
    )
    validation_fraction: float = Field(
        default=DEFAULT_VALIDATION_FRACTION,
        ge=0.0,
        lt=1.0,
        description="Share of problem groups in the `validation` split: the checkpoint's early stopping and "
        "best epoch (and recipe tuning). Never used for the reported acceptance.",
    )
    location: str | None = Field(
        default=None,
        description="Where the partition's source reads from: a file, folder or glob (local sources) or a "
        "Hugging Face dataset id; empty = the source's default.",
    )


def _unknown_source_failure(name: str, exc: KeyError) -> dg.Failure:
    broken = "; ".join(f"{e.plugin}: {e.error}" for e in load_errors)
    hint = f" Plugins that failed to load: {broken}." if broken else ""
    return dg.Failure(description=f"{exc.args[0]}{hint}")


def _metadata(found: Collection, table: pa.Table, path, version: str, location: str | None, rule: SplitRule) -> dict:
    by_reason = found.skipped_by_reason
    splits = table.column("split").to_pylist()
    meta: dict = {
        "dagster/row_count": table.num_rows,
        "rows_read": found.rows_read,
        "rows_kept": table.num_rows,
        "unique_prompts": found.unique,
        "duplicates": found.duplicates,
        "skipped": len(found.skips),
        **{f"skipped_{reason}": by_reason.get(reason, 0) for reason in sorted(set(SKIP_REASONS) | set(by_reason))},
        **{split: splits.count(split) for split in SPLITS},
        "groups": len(set(table.column("group_id").to_pylist())),
        "with_reference": table.num_rows - table.column("reference").null_count,
        "source_version": version,
        "location": location or "(source default)",
        "path": dg.MetadataValue.path(str(path)),
        "source_complete": found.error is None,
        "evaluation_only": rule.evaluation_only,
        "validation_fraction": rule.validation_fraction,
        "heldout_fraction": rule.heldout_fraction,
    }
    if found.skips:
        shown = "\n".join(f"- {s.message}" for s in found.skips[:EXAMPLES_SHOWN])
        meta["skipped_examples"] = dg.MetadataValue.md(shown)
    if found.error:
        meta["source_error"] = found.error
    return meta


def check_results(found: Collection, kept: int) -> list[dg.AssetCheckResult]:
    """``source_read_completely`` and ``has_prompts``; a failure names the counts and what to change."""
    reasons = ", ".join(f"{n} {reason}" for reason, n in found.skipped_by_reason.most_common()) or "none"
    return [
        check_result(
            found.error is None,
            {"error": found.error or "", "rows_read": found.rows_read},
            check_name="source_read_completely",
            failed=found.error or "",
            fix="repair the row the error names, set `location` to a readable copy of the dataset, or fix the "
            "plugin; then re-materialize this partition (the rows read before the error are kept meanwhile)",
        ),
        check_result(
            kept > 0,
            {
                "rows_kept": kept,
                "rows_read": found.rows_read,
                "skipped": len(found.skips),
                "duplicates": found.duplicates,
            },
            check_name="has_prompts",
            failed=f"no usable prompt: {found.rows_read} rows read, {len(found.skips)} skipped ({reasons}), "
            f"{found.duplicates} duplicates",
            fix="point `location` at chat prompts (rows with OpenAI `messages` or ShareGPT `conversations`); "
            "`skipped_examples` and skipped.json say why each row was skipped",
        ),
    ]


def build(partitions: dg.PartitionsDefinition) -> dict:
    @dg.asset(
        name="prompts",
        partitions_def=partitions,
        group_name=PIPELINE,
        kinds={"python", "parquet"},
        code_version=CODE_VERSION,
        check_specs=[
            dg.AssetCheckSpec(
                "source_read_completely",
                asset="prompts",
                blocking=True,
                description="The source yielded every row without raising (else only a prefix was kept).",
            ),
            dg.AssetCheckSpec(
                "has_prompts",
                asset="prompts",
                blocking=True,
                description="At least one usable prompt was kept.",
            ),
        ],
    )
    def prompts(context: dg.AssetExecutionContext, config: PromptsConfig, storage: StorageRoot) -> dg.MaterializeResult:
        """Chat prompts of one dataset source (the partition), each with the dataset's original answer.

        Rows are validated and normalized, ided by a hash of source and messages, de-duplicated,
        optionally sampled, and split train / validation / heldout by a hash of each prompt's problem
        group (an evaluation-only source: all heldout); skipped rows are counted by reason.
        """
        name = context.partition_key
        try:
            source = dataset_source(name)
        except KeyError as exc:
            raise _unknown_source_failure(name, exc) from None
        location = config.location
        started = time.monotonic()

        def progress(found: Collection, elapsed: float) -> None:
            context.log.info(
                f"{name}: {found.rows_read} rows read ({found.rows_read / elapsed:.0f}/s), "
                f"{found.unique} unique, {found.duplicates} duplicates, {len(found.skips)} skipped"
            )

        try:
            rule = SplitRule(config.validation_fraction, config.heldout_fraction, source.evaluation_only)
        except ValueError as exc:
            raise dg.Failure(description=f"prompts config: {exc}") from None
        try:
            version = source.resolved_version(location)
            found = collect(source, location, limit=config.limit, seed=config.seed, rule=rule, progress=progress)
        except SourceUnavailable as exc:
            raise dg.Failure(description=str(exc)) from None

        folder = storage.path("prompts", name)
        table = pa.Table.from_pylist([p.as_row() for p in found.prompts], schema=PROMPTS_SCHEMA)
        path = write_parquet(table, folder / PROMPTS_FILE)
        write_json([{"row": s.row, "reason": s.reason, "detail": s.detail} for s in found.skips], folder / SKIPPED_FILE)

        for skip in found.skips[:EXAMPLES_SHOWN]:
            context.log.warning(skip.message)
        if len(found.skips) > EXAMPLES_SHOWN:
            context.log.warning(
                f"{len(found.skips) - EXAMPLES_SHOWN} more skipped rows listed in {folder / SKIPPED_FILE}"
            )
        if found.error:
            context.log.error(found.error)
        elapsed = time.monotonic() - started
        context.log.info(
            f"{name}: kept {table.num_rows} of {found.rows_read} rows in {elapsed:.1f}s "
            f"({found.duplicates} duplicates, {len(found.skips)} skipped) -> {path}"
        )
        return dg.MaterializeResult(
            metadata={
                **_metadata(found, table, path, version, location, rule),
                **asset_plan_metadata(storage.root, [name], "prompts"),
            },
            data_version=dg.DataVersion(table_version(table, VERSIONED_COLUMNS)),
            check_results=check_results(found, table.num_rows),
        )

    return {"assets": [prompts]}
