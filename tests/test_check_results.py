"""A failed asset check says what failed, with the numbers, and which setting to change; a passed one stays quiet."""

from __future__ import annotations

import dagster as dg

from eagle_assets.assets import prompts
from eagle_assets.assets.reasoning_samples import error_rate_check_result, truncation_check_result
from eagle_assets.assets.token_sequences import drift_check_result
from eagle_assets.prompt_collection import Collection
from eagle_assets.prompt_records import Skip
from eagle_assets.tokenization import DriftReport

SAMPLES = {"prompts_selected": 50, "ok": 40, "errors": 6, "missing": 4, "error_rate": 0.2,
           "truncated": 12, "truncation_rate": 0.3}


def failure(result: dg.AssetCheckResult) -> tuple[str, str]:
    """(description, what_to_change) of a failed result, after the invariants every failure keeps."""
    assert not result.passed
    assert result.metadata["what_failed"].value in result.description
    fix = result.metadata["what_to_change"].value
    assert result.description.endswith(f"What to change: {fix}")
    return result.description, fix


def test_error_rate_failure_names_the_counts_the_first_errors_and_the_settings():
    result = error_rate_check_result(SAMPLES, 0.02, ["prompt p1: HTTP 500 (retried on the next materialization)"])
    description, fix = failure(result)
    assert result.check_name == "error_rate_below_limit" and result.severity == dg.AssetCheckSeverity.ERROR
    assert "20.0% of 50 selected prompts" in description and "6 errors, 4 never captured" in description
    assert "max_error_rate 2.0%" in description
    assert "request_timeout_s" in fix and "max_error_rate" in fix
    assert "HTTP 500" in result.metadata["examples"].value


def test_truncation_failure_is_a_warning_naming_max_tokens():
    result = truncation_check_result(SAMPLES, 0.25, max_tokens=64)
    description, fix = failure(result)
    assert result.severity == dg.AssetCheckSeverity.WARN
    assert "12 of 40 ok samples (30.0%) stopped at max_tokens=64" in description
    assert "raise max_tokens" in fix and "max_model_len" in fix


def test_passed_checks_carry_their_numbers_and_no_failure_text():
    result = error_rate_check_result(SAMPLES, 0.5, [])
    assert result.passed and result.description is None
    assert result.metadata["error_rate"].value == 0.2 and "what_to_change" not in result.metadata


def test_prompts_failures_name_the_rows_and_the_location_setting():
    skipped = [Skip("jsonl", str(i), "no_messages", "neither messages nor conversations") for i in range(3)]
    found = Collection("jsonl", rows_read=3, skips=skipped, error="source 'jsonl' raised ValueError: bad json "
                       "after 3 rows (last row read: 3); the rows read before it are kept.")
    read, has = prompts.check_results(found, kept=0)
    description, fix = failure(read)
    assert "ValueError: bad json" in description and "`location`" in fix
    description, fix = failure(has)
    assert "3 rows read, 3 skipped (3 no_messages)" in description and "skipped_examples" in fix


def test_template_drift_fails_on_prompts_and_warns_on_completions():
    prompt_drift = drift_check_result(DriftReport(checked=8, prompt_mismatches=2, completion_mismatches=0))
    description, fix = failure(prompt_drift)
    assert prompt_drift.severity == dg.AssetCheckSeverity.ERROR
    assert "of 8 re-rendered samples, 2 prompts (25.0%" in description and "verifier.model_path" in fix
    completion_drift = drift_check_result(DriftReport(checked=8, prompt_mismatches=0, completion_mismatches=4))
    description, fix = failure(completion_drift)
    assert completion_drift.severity == dg.AssetCheckSeverity.WARN
    assert "4 completions (50.0%" in description and "tokenizers" in fix
