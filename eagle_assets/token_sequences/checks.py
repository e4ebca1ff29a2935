"""The ``template_drift`` check's result: a failure says how many re-rendered samples differ and what to do.
A prompt mismatch fails it with severity ERROR, which, the check being blocking, keeps hidden_states from
running on the rows in the same run."""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.checks import check_result
from eagle_assets.token_sequences.drift import MAX_PROMPT_MISMATCH_RATE, PROMPT_DRIFT_FIX, DriftReport

# Completions may legitimately differ (the model sampled a non-canonical tokenization).
WARN_COMPLETION_MISMATCH_RATE = 0.1


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
        fix=f"hidden_states does not run on these rows (this check blocks it). {PROMPT_DRIFT_FIX}"
        if not prompt_ok
        else "some sampled completions tokenize differently when re-encoded (a few are normal); if many, use the "
        "server's tokenizers/transformers versions here: rows rendered without server tokens would differ",
    )
