"""The verdicts of ``eagle3_eval``'s asset checks, from the metadata of its latest materialization.

Pure functions (no instance, no server), so a failing case is testable without an evaluation; each failure
says what failed, with the numbers, and what to change (``check_result``).
"""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.checks import check_result
from eagle_assets.eagle3_checkpoint.checks import NEW_RUN
from eagle_assets.eagle3_eval.per_request import AGREEMENT


def acceptance_check_result(run: str, metadata: dict | None) -> dg.AssetCheckResult:
    """`acceptance_length_above_floor`: the vLLM-measured acceptance length τ of the in-distribution set (from
    the `eagle3_eval` materialization's `metadata`, None when there is none) against `min_acceptance_length`."""
    if metadata is None:
        return check_result(
            False,
            {"training_run": run},
            failed=f"eagle3_eval of training run {run!r} has never been materialized",
            fix=f"materialize eagle3_eval for partition {run!r} (after its eagle3_checkpoint)",
        )
    label = metadata["eval_set"]
    tau, floor = metadata[f"{label}/acceptance_length"], metadata["min_acceptance_length"]
    return check_result(
        tau >= floor,
        {"eval_set": label, "acceptance_length": tau, "min_acceptance_length": floor},
        failed=f"acceptance length τ on {label} is {tau:.3f}, below min_acceptance_length {floor} (τ = 1 + "
        "accepted/drafts, measured by vLLM)",
        fix=f"train a better draft ({NEW_RUN} with more epochs or more training data) and evaluate it; the "
        "per-position acceptance (acceptance_pos_k) shows where proposals stop being accepted; if the floor "
        "is too strict for this verifier, re-materialize eagle3_eval with a lower min_acceptance_length",
    )


def counters_check_result(metadata: dict) -> dg.AssetCheckResult:
    """`per_request_matches_counters` from an `eagle3_eval` materialization's metadata (``{}``: none yet)."""
    differences = {k.removesuffix("/tau_vs_counters"): v for k, v in metadata.items() if k.endswith("/tau_vs_counters")}
    without = [
        k.removesuffix("/requests_without_metrics")
        for k, v in metadata.items()
        if k.endswith("/requests_without_metrics") and v
    ]
    apart = {label: d for label, d in differences.items() if d > AGREEMENT}
    passed = bool(differences) and not apart and not without
    if not metadata:
        failed, fix = "eagle3_eval has not been materialized for this training run", "materialize eagle3_eval"
    elif not differences or without:
        failed = f"requests came back without per-request statistics ({', '.join(without) or 'every set'})"
        fix = (
            "serve with --enable-per-request-metrics --per-request-spec-decode-metrics detailed (eagle3_eval adds "
            "them to the servers it starts; an external server needs them on its command line), vLLM >= 0.32"
        )
    else:
        failed = ", ".join(f"{label}: {d:.2%} apart" for label, d in apart.items()) + f" (more than {AGREEMENT:.0%})"
        fix = "keep the speculating server to this evaluation alone while it measures (its counters are server-wide)"
    return check_result(
        passed,
        {f"{label}/tau_vs_counters": d for label, d in differences.items()},
        failed=failed,
        fix=fix,
        severity=dg.AssetCheckSeverity.WARN,
    )
