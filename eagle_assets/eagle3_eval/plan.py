"""What one ``eagle3_eval`` measures, without Dagster: the checkpoint (it must belong to the training run),
the in-distribution partitions and the out-of-distribution ones, and the prompts of both sets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, prompts_file, read_training_record
from eagle_assets.eagle3_eval.eval_sets import EvalSet, EvalSetError, heldout_set, require_prompts, trained_on


class EvalPlanError(ValueError):
    """What to evaluate cannot be decided from what is stored; the message says what to change."""


def check_checkpoint(checkpoint: Path, training_run: str) -> Path:
    """``checkpoint`` when it is a checkpoint folder trained by ``training_run`` (or by no recorded run)."""
    if not (checkpoint / "config.json").exists():
        raise EvalPlanError(
            f"checkpoint {checkpoint} is gone or not a checkpoint folder: `eagle-assets checkpoints` lists "
            f"the kept ones; re-materialize {EAGLE3_CHECKPOINT} for training run {training_run!r}"
        )
    trained_by = read_training_record(checkpoint).get("training_run")
    if trained_by is not None and trained_by != training_run:
        raise EvalPlanError(
            f"checkpoint {checkpoint.name} belongs to training run {trained_by!r}, not {training_run!r}: evaluate it "
            f"in partition {trained_by!r}, so each run's evaluations stay its own"
        )
    return checkpoint


def training_partitions(checkpoint: Path) -> list[str]:
    return list(read_training_record(checkpoint).get("data", {}).get("partitions", []))


def set_label(kind: str, partitions: list[str]) -> str:
    """A prompt set's name in metadata keys: ``heldout[demo]``, ``ood[demo_ood+mine]``."""
    return f"{kind}[{'+'.join(partitions)}]"


def ood_partitions(requested: list[str] | None, evaluation_only: Sequence[str], root: Path, log) -> list[str]:
    """The out-of-distribution partitions: ``requested`` (each must be evaluation-only), else every
    evaluation-only source whose prompts are materialized (``[]`` requests none)."""
    evaluation_only = list(evaluation_only)
    if requested is not None:
        wrong = [p for p in requested if p not in evaluation_only]
        if wrong:
            raise EvalPlanError(
                f"ood_partitions {wrong} are not evaluation-only sources (their prompts have train "
                f"rows); the evaluation-only sources are {evaluation_only}"
            )
        return list(requested)
    chosen = [p for p in evaluation_only if prompts_file(root, p).exists()]
    unmaterialized = sorted(set(evaluation_only) - set(chosen))
    if unmaterialized:
        log.info(f"evaluation-only partitions without materialized prompts, not evaluated: {unmaterialized}")
    return chosen


def evaluation_only_sources(sources: Mapping[str, object]) -> list[str]:
    """The names of the dataset sources registered with ``evaluation_only``."""
    return [name for name, source in sources.items() if source.evaluation_only]


@dataclass(frozen=True)
class EvalPlan:
    """A checkpoint and the prompt sets it is measured on."""

    checkpoint: Path
    partitions: list[str]  # the in-distribution set's
    heldout: EvalSet
    ood: EvalSet
    # Every set measured, in order, with its version (eagle3_eval.suite_sets): held-out, out-of-distribution,
    # registered suites. Empty: the held-out and out-of-distribution sets alone.
    suites: tuple = ()

    @property
    def label(self) -> str:
        return set_label("heldout", self.partitions)

    @property
    def ood_label(self) -> str | None:
        return set_label("ood", self.ood.partitions) if self.ood.partitions else None


def plan_evaluation(
    checkpoint: Path,
    root: Path,
    *,
    partitions: list[str],
    known_partitions: list[str],
    ood_requested: list[str] | None,
    evaluation_only: Sequence[str],
    max_prompts: int,
    log,
) -> EvalPlan:
    """The held-out prompts of ``partitions`` (empty: the checkpoint's training partitions, else every
    known one) and of the out-of-distribution partitions, each without a problem the checkpoint trained
    or validated on; logs a warning for each set such prompts were left out of."""
    chosen = partitions or training_partitions(checkpoint) or known_partitions
    try:
        trained = trained_on(checkpoint)
        heldout = require_prompts(heldout_set("in-distribution", root, chosen, max_prompts, trained))
        ood = heldout_set(
            "out-of-distribution", root, ood_partitions(ood_requested, evaluation_only, root, log), max_prompts, trained
        )
    except EvalSetError as err:
        raise EvalPlanError(str(err)) from None
    for chosen_set in (heldout, ood):
        if chosen_set.excluded_trained:
            log.warning(
                f"{chosen_set.name}: {chosen_set.excluded_trained} held-out prompts left out: "
                "the checkpoint trained or validated on their problem (prompts re-split after "
                "training, or one problem in several partitions)"
            )
    return EvalPlan(checkpoint, list(chosen), heldout, ood)
