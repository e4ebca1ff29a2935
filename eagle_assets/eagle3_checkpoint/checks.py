"""The verdicts of `eagle3_checkpoint`'s asset checks, from what each check read.

Pure functions (no instance, no files), so a failing case is testable without training; each failure
says what failed, with the numbers, and what to change (`check_result`).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from eagle_assets.core.checks import check_result

ACCURACY_KEY = "val_full_acc_0"
# A new recipe is a new training run (eagle3_checkpoint refuses another recipe under a recorded run name).
NEW_RUN = "add a training run for the new recipe (launchpad: 'Add partition', or `eagle-assets add-training-run NAME`)"


def _problem_list(problems: list[str]) -> str:
    return "\n".join(problems) or "none"


def loads_check_result(folder: Path, problems: list[str], facts: dict) -> dg.AssetCheckResult:
    """`loads_with_speculators`: the problems speculators found loading and running the kept checkpoint."""
    return check_result(
        not problems,
        {**facts, "checkpoint": dg.MetadataValue.path(str(folder)), "problems": _problem_list(problems)},
        failed=f"checkpoint {folder.name} does not load or run as an EAGLE-3 draft: {len(problems)} problem(s): "
        + "; ".join(problems),
        fix="a checkpoint that speculators cannot load was written by another speculators version or a changed "
        "trainer: check `pip show speculators` against pyproject.toml, then re-materialize eagle3_checkpoint "
        "for this training run; non-finite weights mean training diverged: " + NEW_RUN + " with a lower lr",
    )


def learned_check_result(metadata: dict) -> dg.AssetCheckResult:
    """`learned`: the checkpoint materialization's first-proposal validation accuracy against its floor
    (`min_val_accuracy`) and the most-frequent-token baseline (`top_token_share`)."""
    accuracy, floor, baseline = (metadata.get(k) for k in (ACCURACY_KEY, "min_val_accuracy", "top_token_share"))
    if None in (accuracy, floor, baseline):
        missing = [
            k
            for k, v in ((ACCURACY_KEY, accuracy), ("min_val_accuracy", floor), ("top_token_share", baseline))
            if v is None
        ]
        return check_result(
            False,
            {"missing": ", ".join(missing)},
            failed=f"the latest eagle3_checkpoint materialization lacks {', '.join(missing)}",
            fix="re-materialize eagle3_checkpoint for this training run (a materialization from "
            "older code did not record them)",
        )
    below_floor, at_baseline = accuracy < floor, accuracy <= baseline
    reasons = ([f"below min_val_accuracy {floor}"] if below_floor else []) + (
        [f"not above the most-frequent-token baseline {baseline:.3f}"] if at_baseline else []
    )
    return check_result(
        not reasons,
        {ACCURACY_KEY: accuracy, "min_val_accuracy": floor, "top_token_share": baseline},
        failed=f"the draft's first-proposal validation accuracy ({ACCURACY_KEY}, best epoch) is {accuracy:.3f}: "
        + " and ".join(reasons),
        fix=f"training did not learn enough: {NEW_RUN} with more epochs, another lr, or more training data "
        "(more prompts or dataset partitions); if the floor is too strict for this data, re-materialize the run "
        "with a lower min_val_accuracy (a check floor, not part of the recipe)",
    )


def matches_verifier_check_result(folder: Path, problems: list[str]) -> dg.AssetCheckResult:
    """`matches_verifier`: where the checkpoint disagrees with the verifier resource and the captured features."""
    return check_result(
        not problems,
        {"checkpoint": dg.MetadataValue.path(str(folder)), "problems": _problem_list(problems)},
        failed=f"checkpoint {folder.name} does not fit the verifier or the hidden states it was trained on: "
        + "; ".join(problems),
        fix="point the verifier resource (verifier.model_path) at the model the hidden states were captured from; "
        "if the verifier changed on purpose, re-materialize hidden_states, then " + NEW_RUN,
    )
