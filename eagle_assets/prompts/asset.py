"""The ``prompts`` asset: one dataset source, validated, de-duplicated, ided and split, as Parquet."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import dagster as dg
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata
from eagle_assets.core.layout import PIPELINE, PROMPTS, SPLITS, asset_folder
from eagle_assets.plugin_manager import dataset_source, load_errors
from eagle_assets.prompts.checks import check_results
from eagle_assets.prompts.records import SKIP_REASONS
from eagle_assets.prompts.splits import DEFAULT_HELDOUT_FRACTION, DEFAULT_VALIDATION_FRACTION, SplitRule
from eagle_assets.prompts.write import EXAMPLES_SHOWN, WrittenPrompts, write_prompts
from eagle_assets.resources import StorageRoot
from eagle_assets.sources import SourceUnavailable

# Bump when the rows this asset writes for the same input would change.
CODE_VERSION = "prompts-3"


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


def _unknown_source_failure(exc: KeyError) -> dg.Failure:
    broken = "; ".join(f"{e.plugin}: {e.error}" for e in load_errors)
    hint = f" Plugins that failed to load: {broken}." if broken else ""
    return dg.Failure(description=f"{exc.args[0]}{hint}")


def _metadata(written: WrittenPrompts, location: str | None, rule: SplitRule) -> dict:
    found, table = written.found, written.table
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
        "source_version": written.source_version,
        "location": location or "(source default)",
        "path": dg.MetadataValue.path(str(written.path)),
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
            raise _unknown_source_failure(exc) from None
        try:
            rule = SplitRule(config.validation_fraction, config.heldout_fraction, source.evaluation_only)
        except ValueError as exc:
            raise dg.Failure(description=f"prompts config: {exc}") from None
        try:
            written = write_prompts(
                source,
                asset_folder(storage.root, PROMPTS, name),
                context.log,
                location=config.location,
                limit=config.limit,
                seed=config.seed,
                rule=rule,
            )
        except SourceUnavailable as exc:
            raise dg.Failure(description=str(exc)) from None
        return dg.MaterializeResult(
            metadata={
                **_metadata(written, config.location, rule),
                **asset_plan_metadata(storage.root, [name], "prompts"),
            },
            data_version=dg.DataVersion(written.data_version),
            check_results=check_results(written.found, written.table.num_rows),
        )

    return {"assets": [prompts]}
