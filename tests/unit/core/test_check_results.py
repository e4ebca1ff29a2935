"""A failed asset check says what failed, with the numbers, and which setting to change; a passed one stays quiet."""

from __future__ import annotations

import dagster as dg

from eagle_assets.eagle3_checkpoint.checks import (
    learned_check_result,
    loads_check_result,
    matches_verifier_check_result,
)
from eagle_assets.eagle3_eval.checks import acceptance_check_result
from eagle_assets.prompts import asset as prompts
from eagle_assets.prompts.collection import Collection
from eagle_assets.prompts.records import Skip
from eagle_assets.reasoning_samples.asset import error_rate_check_result, truncation_check_result
from eagle_assets.token_sequences.asset import drift_check_result
from eagle_assets.token_sequences.drift import DriftReport

SAMPLES = {
    "prompts_selected": 50,
    "requests_selected": 50,
    "ok": 40,
    "errors": 6,
    "missing": 4,
    "error_rate": 0.2,
    "truncated": 12,
    "truncation_rate": 0.3,
}


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
    found = Collection(
        "jsonl",
        rows_read=3,
        skips=skipped,
        error="source 'jsonl' raised ValueError: bad json "
        "after 3 rows (last row read: 3); the rows read before it are kept.",
    )
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


def test_learned_failure_names_the_accuracy_its_floor_and_baseline_and_the_training_settings():
    result = learned_check_result({"val_full_acc_0": 0.31, "min_val_accuracy": 0.5, "top_token_share": 0.4})
    description, fix = failure(result)
    assert "accuracy (val_full_acc_0, best epoch) is 0.310" in description
    assert "below min_val_accuracy 0.5 and not above the most-frequent-token baseline 0.400" in description
    assert "epochs" in fix and "lr" in fix and "add-training-run" in fix and "min_val_accuracy" in fix
    assert result.metadata["top_token_share"].value == 0.4
    assert learned_check_result({"val_full_acc_0": 0.9, "min_val_accuracy": 0.5, "top_token_share": 0.4}).passed


def test_learned_fails_on_a_materialization_without_the_numbers():
    description, fix = failure(learned_check_result({"val_full_acc_0": 0.9}))
    assert "lacks min_val_accuracy, top_token_share" in description and "re-materialize eagle3_checkpoint" in fix


def test_checkpoint_load_and_verifier_failures_list_the_problems_and_what_to_change(tmp_path):
    folder = tmp_path / "0123abcd"
    loads = loads_check_result(folder, ["non-finite values in ['fc.weight']"], {"draft_vocab_size": 64})
    description, fix = failure(loads)
    assert "checkpoint 0123abcd" in description and "1 problem(s): non-finite values in ['fc.weight']" in description
    assert "speculators" in fix and "lower lr" in fix and loads.metadata["draft_vocab_size"].value == 64
    mismatch = matches_verifier_check_result(folder, ["hidden sizes differ: {'draft': 64, 'verifier': 128}"])
    description, fix = failure(mismatch)
    assert "hidden sizes differ: {'draft': 64, 'verifier': 128}" in description
    assert "verifier.model_path" in fix and "hidden_states" in fix
    assert matches_verifier_check_result(folder, []).passed


def test_acceptance_failure_names_tau_the_set_and_the_floor():
    metadata = {"eval_set": "heldout[demo]", "heldout[demo]/acceptance_length": 1.42, "min_acceptance_length": 2.0}
    result = acceptance_check_result("baseline", metadata)
    description, fix = failure(result)
    assert "τ on heldout[demo] is 1.420, below min_acceptance_length 2.0" in description
    assert "acceptance_pos_k" in fix and "min_acceptance_length" in fix
    assert result.metadata["acceptance_length"].value == 1.42
    description, fix = failure(acceptance_check_result("baseline", None))
    assert "'baseline' has never been materialized" in description and "partition 'baseline'" in fix
