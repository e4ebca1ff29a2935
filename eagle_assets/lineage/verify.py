"""Verifying a checkpoint's lineage: the record against its sha256 (beside it and, given the instance, in
the checkpoint materialization's metadata), the checkpoint's content hash against its folder name and
training.json, and every recorded hash recomputed; each artifact that changed or vanished is named.

``root=...`` overrides the recorded storage root, so a moved data folder still verifies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.files import file_sha256, hash_of_model_files, model_file_hashes
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, LINEAGE_DIGEST_FILE, LINEAGE_FILE
from eagle_assets.lineage.record import (
    DATA_VERSION_TAG,
    LINEAGE_DIGEST_KEY,
    LineageError,
    jsonable,
    links_hash,
    read_json,
    read_lineage,
)


@dataclass(frozen=True)
class Discrepancy:
    """One stored artifact, or the lineage record itself, that no longer matches what was recorded."""

    kind: str  # "changed" | "vanished" | "misnamed" | "unrecorded"
    path: str  # as recorded (relative to the storage root or the checkpoint)
    where: Path  # the resolved file
    asset: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.asset} {self.path} ({self.where})" + (f": {self.detail}" if self.detail else "")


@dataclass
class Verification:
    """What :func:`verify_lineage` found: ``problems`` empty = every check passed."""

    checked: int  # artifacts whose hash was recomputed
    problems: list[Discrepancy]
    notes: list[str]  # checks that could not be made (e.g. the instance never recorded this checkpoint)


def recorded_digest(
    instance: dg.DagsterInstance, checkpoint_dir: Path, content_hash: str
) -> tuple[str | None, str] | None:
    """(recorded lineage sha256, run id) of the latest checkpoint materialization of this folder (same
    path, or the same content hash as data version: a copied folder), or None when there is none."""
    folder = checkpoint_dir.resolve()
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(EAGLE3_CHECKPOINT)), limit=1000
    ).records  # newest first
    for record in records:
        entry = record.event_log_entry
        mat = entry.asset_materialization
        path = jsonable((mat.metadata or {}).get("path"))
        same_version = bool(content_hash) and (mat.tags or {}).get(DATA_VERSION_TAG) == content_hash[:16]
        if same_version or (path and Path(path).resolve() == folder):
            return jsonable((mat.metadata or {}).get(LINEAGE_DIGEST_KEY)), entry.run_id
    return None


def _model_file_hashes(folder: Path) -> dict[str, str] | None:
    """The checkpoint's config and weights sha256 (every check that needs them shares one reading),
    None when a file of them is gone."""
    try:
        return model_file_hashes(folder)
    except OSError:
        return None


def _record_problems(
    folder: Path, instance: dg.DagsterInstance | None, content_hash: str | None, notes: list[str]
) -> list[Discrepancy]:
    """The lineage record against its sha256 beside it and in the instance's materialization metadata."""
    record = folder / LINEAGE_FILE
    actual = file_sha256(record)
    problems = []
    digest_file = folder / LINEAGE_DIGEST_FILE
    if not digest_file.is_file():
        problems.append(
            Discrepancy(
                "vanished",
                LINEAGE_DIGEST_FILE,
                digest_file,
                "lineage",
                "the record's sha256 is missing: lineage.json is unprotected",
            )
        )
    elif digest_file.read_text().split()[:1] != [actual]:
        problems.append(
            Discrepancy(
                "changed",
                LINEAGE_FILE,
                record,
                "lineage",
                f"sha256 {actual[:16]} differs from {LINEAGE_DIGEST_FILE}: edited since written",
            )
        )
    if instance is not None:
        found = recorded_digest(instance, folder, content_hash or "")
        if found is None:
            notes.append(
                f"the Dagster instance has no {EAGLE3_CHECKPOINT} materialization of {folder}: "
                "checked against lineage.sha256 only"
            )
        elif found[0] is None:
            problems.append(
                Discrepancy(
                    "unrecorded",
                    LINEAGE_FILE,
                    record,
                    "lineage",
                    f"run {found[1][:8]} recorded no {LINEAGE_DIGEST_KEY}",
                )
            )
        elif found[0] != actual:
            problems.append(
                Discrepancy(
                    "changed",
                    LINEAGE_FILE,
                    record,
                    "lineage",
                    f"sha256 {actual[:16]} differs from the {LINEAGE_DIGEST_KEY} "
                    f"{found[0][:16]} Dagster recorded (run {found[1][:8]})",
                )
            )
    return problems


def _checkpoint_problems(folder: Path, lineage: Mapping[str, Any], actual: str | None) -> list[Discrepancy]:
    """The folder's content hash (``actual``, None when a model file is gone) against its name;
    training.json against the record."""
    if actual is None:
        return []  # a weights or config file is gone: named as vanished with the checkpoint's files
    problems = []
    # Kept folders are named by their content hash (a changed weight file is named on its own below);
    # a user's copy under another name is fine.
    if re.fullmatch(r"[0-9a-f]{16}", folder.name) and folder.name != actual[:16]:
        problems.append(
            Discrepancy(
                "misnamed",
                ".",
                folder,
                EAGLE3_CHECKPOINT,
                f"the folder is named {folder.name} but its content hash is {actual[:16]}",
            )
        )
    training = read_json(folder / "training.json")
    for key, value in training.items():
        if json.dumps(lineage["training"].get(key), sort_keys=True) != json.dumps(value, sort_keys=True):
            problems.append(
                Discrepancy(
                    "changed",
                    f"training.{key}",
                    folder / LINEAGE_FILE,
                    "lineage",
                    "differs from the checkpoint's training.json",
                )
            )
    return problems


def _artifact_changed(where: Path, artifact: Mapping[str, Any], sha256: str | None = None) -> str | None:
    """ "vanished", "changed" or None (intact) for one recorded artifact; ``sha256``: the file's, where
    already computed."""
    if "links" in artifact:
        return "changed" if not where.is_dir() or links_hash(where) != artifact["sha256"] else None
    if not where.is_file():
        return "vanished"
    return "changed" if (sha256 or file_sha256(where)) != artifact["sha256"] else None


def verify_lineage(
    checkpoint_dir: str | Path, root: str | Path | None = None, instance: dg.DagsterInstance | None = None
) -> Verification:
    """Check the lineage record (against ``lineage.sha256`` and, given ``instance``, the sha256 Dagster
    recorded), the checkpoint's content hash and name, and recompute every recorded hash. ``root``
    overrides the storage root recorded in lineage.json (a data folder that moved or was copied)."""
    folder = Path(checkpoint_dir)
    if not (folder / LINEAGE_FILE).is_file():
        read_lineage(folder)  # raises the clear "not a checkpoint folder" error
    notes: list[str] = []
    model_hashes = _model_file_hashes(folder)
    content_hash = hash_of_model_files(model_hashes) if model_hashes is not None else None
    problems = _record_problems(folder, instance, content_hash, notes)
    try:
        lineage = read_lineage(folder)
    except LineageError as exc:
        if not problems:
            raise
        return Verification(
            0, [*problems, Discrepancy("changed", LINEAGE_FILE, folder / LINEAGE_FILE, "lineage", str(exc))], notes
        )
    problems += _checkpoint_problems(folder, lineage, content_hash)
    base = Path(root) if root is not None else Path(lineage["storage_root"])
    known = model_hashes or {}
    entries = [(base / a["path"], a, a["asset"], None) for a in lineage["artifacts"]]
    entries += [
        (folder / f["path"], f, EAGLE3_CHECKPOINT, known.get(f["path"])) for f in lineage.get("checkpoint_files", [])
    ]
    for where, artifact, asset, sha256 in entries:
        kind = _artifact_changed(where, artifact, sha256)
        if kind:
            problems.append(Discrepancy(kind, artifact["path"], where, asset))
    return Verification(len(entries), problems, notes)
