"""What a storage root must keep: the files of current materializations and of kept checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from eagle_assets.core.layout import EAGLE3_CHECKPOINT as CHECKPOINTS
from eagle_assets.core.layout import LINEAGE_FILE, TRAINING_FILE, TRAINING_LINKS
from eagle_assets.core.partitions import TRAINING_RUNS
from eagle_assets.lineage.materializations import latest_materialization
from eagle_assets.lineage.record import read_json


class Protected:
    """Paths relative to the storage root that must stay, and the folders kept whole."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.folders: set[str] = set()
        self.holding: set[str] = set()  # every folder above a protected path

    def add(self, rel: str, folder: bool = False) -> None:
        rel = rel.strip("/")
        (self.folders if folder else self.files).add(rel)
        parts = rel.split("/")
        self.holding.update("/".join(parts[:i]) for i in range(1, len(parts)))

    def covers(self, rel: str) -> bool:
        """``rel`` is protected itself, lies in a protected folder, or (a folder) holds something protected."""
        if rel in self.files or rel in self.folders or rel in self.holding:
            return True
        parts = rel.split("/")
        return any("/".join(parts[:i]) in self.folders for i in range(1, len(parts)))


def relative_to_root(path: str | Path, root: Path, recorded_root: Path | None = None) -> str | None:
    """``path`` relative to ``root`` (or to the root a checkpoint recorded, for a moved data folder);
    None when it lies elsewhere."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    for base in (b for b in (root, recorded_root) if b is not None):
        for p, b in ((path, base), (path.resolve(), base.resolve())):
            try:
                return p.relative_to(b).as_posix()
            except ValueError:
                continue
    return None


def checkpoint_folders(root: Path) -> list[Path]:
    """Checkpoint folders, newest first (by the lineage record's creation time, then modification time)."""
    folder = root / CHECKPOINTS
    found = (
        [
            p
            for p in folder.iterdir()
            if p.is_dir() and not p.name.startswith((".", "_")) and (p / LINEAGE_FILE).is_file()
        ]
        if folder.is_dir()
        else []
    )

    def age(p: Path) -> tuple:
        return (read_json(p / LINEAGE_FILE).get("created_at", ""), (p / LINEAGE_FILE).stat().st_mtime)

    return sorted(found, key=age, reverse=True)


def current_folders(instance: dg.DagsterInstance, asset: str, root: Path, key: str = "path") -> list[Path]:
    """The folders of ``asset``'s latest materialization of each training run (from its ``key`` metadata)
    under ``root``."""
    folders = []
    for run in instance.get_dynamic_partitions(TRAINING_RUNS):
        path = ((latest_materialization(instance, asset, run) or {}).get("metadata", {})).get(key)
        if path and relative_to_root(path, root) is not None:
            folder = Path(path) if Path(path).is_dir() else Path(path).parent
            if folder not in folders:
                folders.append(folder)
    return folders


def protect_checkpoint(folder: Path, root: Path, protected: Protected) -> None:
    """Everything ``lineage verify`` checks for this checkpoint, and the folders it was trained from."""
    protected.add(folder.relative_to(root).as_posix(), folder=True)
    lineage = read_json(folder / LINEAGE_FILE)
    recorded = Path(lineage["storage_root"]) if lineage.get("storage_root") else None
    for artifact in lineage.get("artifacts", []):
        is_folder = "links" in artifact  # the training folder's links: one entry for the whole folder
        protected.add(artifact["path"], folder=is_folder)
    # The verifier speculators loads with the checkpoint, its path verbatim: a nested verifier's resolved
    # folder under _work (an absolute path; a relative one is a hub id).
    verifier = read_json(folder / "config.json").get("speculators_config", {}).get("verifier", {}).get("name_or_path")
    rel = relative_to_root(verifier, root, recorded) if verifier and Path(verifier).is_absolute() else None
    if rel is not None:
        protected.add(rel, folder=True)
    training = read_json(folder / TRAINING_FILE)
    for where in (training.get("data", {}).get("folder"), training.get("trainer", {}).get("folder")):
        rel = relative_to_root(where, root, recorded) if where else None
        if rel is None:
            continue
        protected.add(rel, folder=True)
        links = root / rel / TRAINING_LINKS
        for link in links.iterdir() if links.is_dir() else ():
            target = (
                relative_to_root(os.path.normpath(link.parent / os.readlink(link)), root) if link.is_symlink() else None
            )
            if target:
                protected.add(target)
