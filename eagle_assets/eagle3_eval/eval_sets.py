"""Which prompts ``eagle3_eval`` sends: held-out prompts, minus any problem the checkpoint trained on.

Two sets are measured side by side:

* **in-distribution** -- the ``heldout`` split of the partitions the draft was trained on;
* **out-of-distribution** -- every prompt of the *evaluation-only* partitions (sources registered with
  ``evaluation_only=True``, e.g. the demo's ``demo_ood``; a user's own eval set is one more such source).

Splits are read from the *current* prompts tables. Training may have used an older split (the prompts
were re-split after training), so a prompt is dropped when its id or its problem group is among the
rows the checkpoint trained or validated on (the training folder's ``rows.parquet``): a held-out number
never includes a problem the draft has seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from eagle_assets.core.layout import EVAL_ROWS_FILE, HELDOUT, TRAINING_FILE, prompts_file, samples_folder
from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.variants import assign_variant, read_variants


class EvalSetError(ValueError):
    """The evaluation prompts cannot be chosen safely; the message names what to do."""


@dataclass(frozen=True)
class TrainedOn:
    """Prompt ids and problem groups of every row a checkpoint trained or validated on."""

    prompt_ids: frozenset[str]
    group_ids: frozenset[str]

    def covers(self, prompt_id: str, group: str) -> bool:
        return prompt_id in self.prompt_ids or group in self.group_ids


@dataclass
class EvalSet:
    name: str
    partitions: list[str]
    requests: list[PromptRequest] = field(default_factory=list)
    excluded_trained: int = 0  # held-out prompts dropped because training saw their problem


def trained_on(checkpoint: Path) -> TrainedOn:
    """What ``checkpoint`` trained on, from the training folder its ``training.json`` names."""
    training = Path(checkpoint) / TRAINING_FILE
    if not training.exists():
        raise EvalSetError(
            f"{training} is missing: without it the trained prompts are unknown and held-out "
            "prompts cannot be proven unseen; evaluate a checkpoint made by eagle3_checkpoint"
        )
    folder = Path(json.loads(training.read_text())["data"]["folder"])
    rows = folder / EVAL_ROWS_FILE
    if not rows.exists():
        raise EvalSetError(
            f"{rows} (the rows {checkpoint} was trained on) is missing: the training folder was "
            "deleted or moved; re-materialize eagle3_checkpoint to rebuild it"
        )
    table = pq.read_table(rows)
    return TrainedOn(frozenset(table["prompt_id"].to_pylist()), frozenset(table["group_id"].to_pylist()))


def heldout_set(name: str, root: Path, partitions: list[str], limit: int, trained: TrainedOn | None = None) -> EvalSet:
    """The first ``limit`` held-out prompts (by prompt id) of ``partitions`` that training never saw."""
    out = EvalSet(name, list(partitions))
    rows = []
    for partition in partitions:
        path = prompts_file(root, partition)
        if not path.exists():
            raise EvalSetError(f"{path} is missing: materialize prompts for partition '{partition}' first")
        table = pq.read_table(path)
        # Each prompt is asked in the sampling variant its partition's capture would give it.
        variants = read_variants(samples_folder(root, partition))
        rows += [
            {**r, "variant": assign_variant(r["prompt_id"], variants)}
            for r in table.select(["prompt_id", "messages", "split", "group_id"]).to_pylist()
            if r["split"] == HELDOUT
        ]
    if trained is not None:
        kept = [r for r in rows if not trained.covers(r["prompt_id"], r["group_id"])]
        out.excluded_trained = len(rows) - len(kept)
        rows = kept
    rows.sort(key=lambda r: r["prompt_id"])
    out.requests = [
        PromptRequest(
            r["prompt_id"],
            [dict(m) for m in r["messages"]],
            HELDOUT,
            r["variant"].sampling(Sampling()) if r["variant"] else None,
        )
        for r in rows[:limit]
    ]
    return out


def require_prompts(chosen: EvalSet) -> EvalSet:
    """``chosen`` when it holds a prompt to send; else :class:`EvalSetError` naming why none is left."""
    if chosen.requests:
        return chosen
    if chosen.excluded_trained:
        raise EvalSetError(
            f"{chosen.name}: no held-out prompt of {chosen.partitions} is left once the {chosen.excluded_trained} "
            "whose problem the checkpoint trained or validated on are excluded (the prompts were re-split after "
            "training): re-materialize eagle3_checkpoint so it trains on the current split"
        )
    raise EvalSetError(
        f"{chosen.name}: the prompts of {chosen.partitions} have no heldout rows: re-materialize prompts with a "
        "larger heldout_fraction (or more prompts), then eagle3_checkpoint, or choose other eagle3_eval partitions"
    )
