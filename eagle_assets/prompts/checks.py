"""The ``prompts`` asset's check results: a failure names the counts and what to change."""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.checks import check_result
from eagle_assets.prompts.collection import Collection


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
