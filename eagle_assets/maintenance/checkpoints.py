"""``eagle-assets checkpoints``: every kept checkpoint with its training run, recipe, upstream data versions,
τ per evaluated prompt set (held-out, out-of-distribution, every eval suite) and lineage status, side by side.

Read from the storage root (each checkpoint's ``training.json`` and ``lineage.json``, the latest
``eagle3_eval`` report of it) and checked against the Dagster instance (``lineage verify``), so it lists
the same checkpoints ``eagle-assets gc`` keeps and any of them can be given to ``eagle3_eval``
(launchpad ``checkpoint``) in its training run's partition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg

from eagle_assets.core.layout import EAGLE3_EVAL as EVALUATIONS
from eagle_assets.core.layout import EVAL_REPORT_FILE, LINEAGE_FILE, PER_DATASET_STAGES, TRAINING_FILE
from eagle_assets.eagle3_eval.numbers import tau_by_set
from eagle_assets.lineage.record import read_json
from eagle_assets.lineage.verify import verify_lineage
from eagle_assets.maintenance.gc import checkpoint_folders


@dataclass
class CheckpointEntry:
    name: str
    path: str
    training_run: str | None  # None: trained before checkpoints were keyed by training run
    created_at: str
    recipe: dict
    data_versions: dict[str, str]  # "asset[partition]" -> the Dagster data version trained from
    tau: dict[str, float]  # prompt set label -> vLLM-measured τ of the latest evaluation of this checkpoint
    lineage: str  # "ok", or the problems `lineage verify` found
    notes: list[str] = field(default_factory=list)
    # prompt set label -> its suite's name and version, the per-request τ and its 95% interval (--json)
    suites: dict[str, dict] = field(default_factory=dict)


def suites_of(report: dict) -> dict[str, dict]:
    """Each evaluated set's suite name and version (as the report recorded them) and its per-request τ."""
    return {
        s["label"]: {
            "name": s["name"],
            "version": s["version"],
            "tau_per_request": report.get(f"{s['label']}/tau_per_request"),
            "tau_ci": [report[f"{s['label']}/tau_ci_low"], report[f"{s['label']}/tau_ci_high"]]
            if f"{s['label']}/tau_ci_low" in report
            else None,
        }
        for s in report.get("suites", [])
    }


def list_checkpoints(
    root: str | Path, instance: dg.DagsterInstance | None, verify: bool = True
) -> list[CheckpointEntry]:
    """The kept checkpoints under ``root``, newest first."""
    root = Path(root).resolve()
    entries = []
    for folder in checkpoint_folders(root):
        lineage = read_json(folder / LINEAGE_FILE)
        training = read_json(folder / TRAINING_FILE)
        report = read_json(root / EVALUATIONS / folder.name / EVAL_REPORT_FILE)
        status, notes = "not verified", []
        if verify:
            result = verify_lineage(folder, instance=instance)
            notes = result.notes
            status = (
                "ok"
                if not result.problems
                else f"{len(result.problems)} problems: " + "; ".join(str(p) for p in result.problems[:3])
            )
        versions = {
            f"{asset}[{partition}]": record["data_version"]
            for asset in PER_DATASET_STAGES  # pipeline order
            for partition, record in lineage.get("dagster", {}).get(asset, {}).items()
            if record
        }
        entries.append(
            CheckpointEntry(
                name=folder.name,
                path=str(folder),
                training_run=training.get("training_run"),
                created_at=lineage.get("created_at", "?"),
                recipe=training.get("recipe") or training.get("settings", {}),
                data_versions=versions,
                tau=tau_by_set(report),
                lineage=status,
                notes=notes,
                suites=suites_of(report),
            )
        )
    return entries


# Always shown; the other recipe fields only where the listed checkpoints differ in them.
SHOWN_RECIPE = ("epochs", "lr")


def _recipe_fields(entries: list[CheckpointEntry]) -> list[str]:
    names = sorted({name for e in entries for name in e.recipe} - set(SHOWN_RECIPE))
    return [*SHOWN_RECIPE, *(name for name in names if len({repr(e.recipe.get(name)) for e in entries}) > 1)]


def report_lines(entries: list[CheckpointEntry]) -> list[str]:
    if not entries:
        return ["no kept checkpoint: materialize eagle3_checkpoint for a training run first"]
    shown = _recipe_fields(entries)
    lines = []
    for e in entries:
        recipe = ", ".join(f"{name}={e.recipe.get(name)!r}" for name in shown)
        tau = ", ".join(f"{label} {value:.3f}" for label, value in sorted(e.tau.items())) or "not evaluated"
        lines += [
            f"{e.name}  run {e.training_run or '(unnamed)'}  created {e.created_at}",
            f"  recipe: {recipe}",
            f"  data: {', '.join(f'{key} {version}' for key, version in e.data_versions.items())}",
            f"  tau: {tau}",
            f"  lineage: {e.lineage}",
            *(f"  note: {note}" for note in e.notes),
        ]
    return lines


def as_json(entries: list[CheckpointEntry]) -> list[dict]:
    return [asdict(e) for e in entries]
