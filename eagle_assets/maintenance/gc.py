"""Garbage collection of the storage root: what no current materialization and no kept checkpoint needs.

Referenced, and never removed:

- the **current** version folder of every upstream asset partition (``versions/<v>/``, and for
  reasoning_samples the current recipe's ``recipes/<id>/``, as ``current.json`` names them), every
  reasoning-sample shard of a kept recipe folder that still holds a row's latest sample, the hidden-state
  files a kept version's ``index.parquet`` lists;
- everything a **kept checkpoint** needs: its folder (``lineage.json``, ``lineage.sha256``, weights),
  every artifact its ``lineage.json`` records (upstream files and the training folder, whose links'
  targets count too) and so the version and recipe folders holding them, the training data and trainer
  folders its ``training.json`` names, and the verifier folder its ``config.json`` names (speculators
  loads the verifier from there: a resolved one lies in ``eagle3_checkpoint/_work``);
- the current ``eagle3_checkpoint`` and ``eagle3_eval`` materializations' folders, of every training run
  (each run's latest checkpoint is kept beyond ``keep_checkpoints``).

Garbage: version and recipe folders that are neither current nor hold a kept checkpoint's file,
hidden-state files no kept index lists, superseded shards (every row re-captured in a later shard of
the same recipe), training data and trainer folders under ``eagle3_checkpoint/_work`` and the resolved
verifier folders beside them (``verifier-*``: a nested verifier's decoder as speculators reads it, made
for training), checkpoints beyond the newest ``keep_checkpoints`` (with their evaluations), and
temporaries left by killed writers. A partition folder the instance has no materialization for is left
alone (it may belong to another instance), and nothing is deleted while a Dagster run is in progress
(its files are not published yet).
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import EAGLE3_CHECKPOINT as CHECKPOINTS
from eagle_assets.core.layout import EAGLE3_EVAL as EVALUATIONS
from eagle_assets.core.layout import (
    HIDDEN_STATES,
    INDEX_FILE,
    PER_DATASET_STAGES,
    REASONING_SAMPLES,
    WORK_DIR,
    current_version,
    published_kind,
)
from eagle_assets.core.layout import TENSORS_DIR as TENSORS
from eagle_assets.core.shards import shard_paths
from eagle_assets.core.units import human_bytes
from eagle_assets.eagle3_checkpoint.verifier_folder import FOLDER_PREFIX as VERIFIER_FOLDER_PREFIX
from eagle_assets.lineage.materializations import latest_materialization
from eagle_assets.maintenance.references import (
    Protected,
    checkpoint_folders,
    current_folders,
    protect_checkpoint,
    relative_to_root,
)

ACTIVE = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)


class CollectionRefused(RuntimeError):
    """Deleting now could remove files a running step is writing; the message names the runs."""


VERSION_FOLDER, RECIPE_FOLDER = "version folder", "recipe folder"


@dataclass(frozen=True)
class Garbage:
    path: Path
    bytes: int
    kind: str  # "hidden-state file" | "superseded shard" | VERSION_FOLDER | RECIPE_FOLDER | "training folder"
    #            | "resolved verifier" | "checkpoint" | "evaluation" | "temporary"
    rows: int | None = None  # a recipe folder's samples


@dataclass
class Collection:
    root: Path
    kept_checkpoints: list[Path] = field(default_factory=list)
    removed_checkpoints: list[Path] = field(default_factory=list)
    garbage: list[Garbage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.garbage)


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (links count as themselves, never followed)."""
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(path) for f in files)


def _superseded_shards(folder: Path) -> list[Path]:
    """Shards of a recipe ``folder`` none of whose rows is its prompt turn's latest (a later shard's row wins)."""
    shards = shard_paths(folder)
    latest: dict[tuple[str, int], int] = {}
    for i, shard in enumerate(shards):
        rows = pq.read_table(shard, columns=["prompt_id", "turn"])
        for key in zip(rows["prompt_id"].to_pylist(), rows["turn"].to_pylist()):
            latest[key] = i
    live = set(latest.values())
    return [s for i, s in enumerate(shards) if i not in live]


def _samples(folder: Path) -> int:
    return sum(pq.read_metadata(shard).num_rows for shard in shard_paths(folder))


def _partition_garbage(asset: str, folder: Path, root: Path, protected: Protected) -> Iterable[tuple[Path, str]]:
    """Candidates in one partition folder: published folders neither current nor holding a kept
    checkpoint's file, and what the kept ones no longer need."""
    published = folder / published_kind(asset)
    current, kept, dropped = current_version(folder), [], []
    for version in sorted(p for p in published.iterdir() if p.is_dir()) if published.is_dir() else ():
        if version.name.startswith("."):
            continue  # a publication's temporary: below
        is_kept = version.name == current or protected.covers(version.relative_to(root).as_posix())
        (kept if is_kept else dropped).append(version)
        if not is_kept:
            yield version, RECIPE_FOLDER if asset == REASONING_SAMPLES else VERSION_FOLDER
    temporaries = set(folder.rglob(".*.tmp"))
    for tmp in sorted(temporaries):
        # Inside a folder that goes anyway (a dropped version, a killed publication's folder): not twice.
        if not any(tmp.is_relative_to(d) for d in dropped) and temporaries.isdisjoint(tmp.parents):
            yield tmp, "temporary"
    if asset == REASONING_SAMPLES:
        for recipe in kept:
            for shard in _superseded_shards(recipe):
                yield shard, "superseded shard"
    if asset == HIDDEN_STATES:
        indexed = {
            f
            for version in kept
            if (version / INDEX_FILE).is_file()
            for f in pq.read_table(version / INDEX_FILE, columns=["file"])["file"].to_pylist()
        }
        tensors = folder / TENSORS
        for path in sorted(tensors.glob("*.safetensors")) if tensors.is_dir() else ():
            if f"{TENSORS}/{path.name}" not in indexed:
                yield path, "hidden-state file"


def _work_kind(name: str) -> str:
    """What a folder under ``eagle3_checkpoint/_work`` is."""
    if name.startswith("."):
        return "temporary"
    # The decoder of a nested verifier as speculators reads it (eagle_assets.eagle3_checkpoint.verifier_folder).
    return "resolved verifier" if name.startswith(VERIFIER_FOLDER_PREFIX) else "training folder"


def find_garbage(root: str | Path, instance: dg.DagsterInstance, keep_checkpoints: int | None = None) -> Collection:
    """What :func:`collect_garbage` would remove, and why the rest stays."""
    root = Path(root).resolve()
    result = Collection(root)
    if keep_checkpoints is not None and keep_checkpoints < 0:
        raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
    checkpoints = checkpoint_folders(root)
    kept = checkpoints if keep_checkpoints is None else checkpoints[:keep_checkpoints]
    for current in current_folders(instance, CHECKPOINTS, root):
        if current.resolve() in {c.resolve() for c in checkpoints} - {k.resolve() for k in kept}:
            kept.append(next(c for c in checkpoints if c.resolve() == current.resolve()))
            result.notes.append(
                f"kept {current.name} beyond --keep-checkpoints: it is a training run's current "
                "eagle3_checkpoint materialization"
            )
    result.kept_checkpoints = kept
    result.removed_checkpoints = [c for c in checkpoints if c not in kept]

    protected = Protected()
    for folder in kept:
        protect_checkpoint(folder, root, protected)
    for evaluation in current_folders(instance, EVALUATIONS, root, key="report"):
        protected.add(relative_to_root(evaluation, root), folder=True)

    candidates: list[tuple[Path, str]] = [(c, "checkpoint") for c in result.removed_checkpoints]
    evals = root / EVALUATIONS
    kept_names = {c.name for c in kept}
    for folder in sorted(evals.iterdir()) if evals.is_dir() else ():
        if folder.is_dir() and folder.name not in kept_names:
            candidates.append((folder, "evaluation"))
    ckpt_root = root / CHECKPOINTS
    for tmp in sorted(ckpt_root.glob(".*")) if ckpt_root.is_dir() else ():
        candidates.append((tmp, "temporary"))
    work = ckpt_root / WORK_DIR
    for folder in sorted(work.iterdir()) if work.is_dir() else ():
        candidates.append((folder, _work_kind(folder.name)))

    for asset in PER_DATASET_STAGES:
        for folder in sorted(p for p in (root / asset).iterdir() if p.is_dir()) if (root / asset).is_dir() else ():
            record = latest_materialization(instance, asset, folder.name)
            path = (record or {}).get("metadata", {}).get("path")
            if record is None or (path and relative_to_root(path, root) is None):
                result.notes.append(
                    f"left alone {asset}/{folder.name}: this Dagster instance has no materialization "
                    "of it under this storage root (another instance's data?)"
                )
                continue
            candidates += list(_partition_garbage(asset, folder, root, protected))

    for path, kind in candidates:
        rel = path.relative_to(root).as_posix()
        if not protected.covers(rel):
            result.garbage.append(Garbage(path, _size(path), kind, _samples(path) if kind == RECIPE_FOLDER else None))
    return result


def active_runs(instance: dg.DagsterInstance) -> list[str]:
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=list(ACTIVE)))
    return [f"{run.run_id[:8]} ({run.job_name}, {run.status.value})" for run in runs]


def collect_garbage(collection: Collection, instance: dg.DagsterInstance) -> int:
    """Remove what :func:`find_garbage` listed; returns the bytes freed. Refused while runs are active."""
    running = active_runs(instance)
    if running:
        raise CollectionRefused(
            f"Dagster runs in progress: {', '.join(running)}; their files may not be indexed "
            "yet, so nothing was deleted. Run gc again when they have finished."
        )
    freed = 0
    for item in collection.garbage:
        if item.path.is_dir() and not item.path.is_symlink():
            shutil.rmtree(item.path)
        else:
            item.path.unlink(missing_ok=True)
        freed += item.bytes
    return freed


def report_lines(collection: Collection, verbose: bool = False) -> list[str]:
    """The kept and removable checkpoints, then the garbage: checkpoints, folders and shards one per
    line, hidden-state files and temporaries grouped by folder unless ``verbose``."""
    root = collection.root
    lines = [f"storage root {root}"]
    for folder in collection.kept_checkpoints:
        lines.append(f"keep checkpoint {folder.relative_to(root)}")
    lines += [f"note: {note}" for note in collection.notes]
    grouped: dict[tuple[str, Path], list[Garbage]] = defaultdict(list)
    for item in collection.garbage:
        if item.kind in ("hidden-state file", "temporary") and not verbose:
            grouped[(item.kind, item.path.parent)].append(item)
        else:
            rows = f", {item.rows} samples" if item.rows is not None else ""
            lines.append(f"{item.kind:<18} {item.path.relative_to(root)}  {human_bytes(item.bytes)}{rows}")
    for (kind, folder), items in sorted(grouped.items(), key=lambda kv: str(kv[0][1])):
        lines.append(
            f"{kind:<18} {folder.relative_to(root)}/: {len(items)} files  {human_bytes(sum(i.bytes for i in items))}"
        )
    lines.append(f"{len(collection.garbage)} unreferenced items, {human_bytes(collection.bytes)}")
    return lines
