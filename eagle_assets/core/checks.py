"""One shape for every asset check's result: a failure says what failed, with the numbers, and what to change."""

import warnings

import dagster as dg

# Partitioned asset checks (files_match_rows, template_drift: one result per dataset partition) are a Dagster
# preview feature used knowingly; its warning would otherwise print wherever a stage's checks are built.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def check_result(
    passed: bool,
    metadata: dict,
    *,
    failed: str,
    fix: str,
    check_name: str | None = None,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetCheckResult:
    """``metadata`` plus, when the check fails, ``what_failed`` and ``what_to_change``, and a description of
    both (Markdown): the UI shows the description above the check's metadata table, where plain text shows
    inline (a Markdown value would hide behind a link)."""
    failure = {} if passed else {"what_failed": failed, "what_to_change": fix}
    return dg.AssetCheckResult(
        check_name=check_name,
        passed=passed,
        severity=severity,
        metadata={**metadata, **failure},
        description=None if passed else f"{failed}\n\nWhat to change: {fix}",
    )
