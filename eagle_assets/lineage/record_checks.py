"""Checks of a checkpoint's lineage record itself, for ``lineage verify``: its sha256 beside it and in the
instance's checkpoint materialization, its signature given the key, and the checkpoint's id
against its folder name and training.json. Each mismatch is a :class:`Discrepancy`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    LINEAGE_DIGEST_FILE,
    LINEAGE_FILE,
    LINEAGE_SIGNATURE_FILE,
)
from eagle_assets.lineage.materializations import newest_first
from eagle_assets.lineage.record import (
    DATA_VERSION_TAG,
    LINEAGE_DIGEST_KEY,
    jsonable,
    read_json,
    signature_matches,
)


@dataclass(frozen=True)
class Discrepancy:
    """One stored artifact, or the lineage record itself, that no longer matches what was recorded."""

    kind: str  # "changed" | "vanished" | "misnamed" | "unrecorded" | "signature"
    path: str  # as recorded (relative to the storage root or the checkpoint)
    where: Path  # the resolved file
    asset: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.asset} {self.path} ({self.where})" + (f": {self.detail}" if self.detail else "")


def recorded_digest(instance: dg.DagsterInstance, checkpoint_dir: Path, kept_id: str) -> tuple[str | None, str] | None:
    """(recorded lineage sha256, run id) of the latest checkpoint materialization of this folder (same
    path, or the same checkpoint id as data version: a copied folder), or None when there is none."""
    folder = checkpoint_dir.resolve()
    for record in newest_first(instance, EAGLE3_CHECKPOINT):
        entry = record.event_log_entry
        mat = entry.asset_materialization
        path = jsonable((mat.metadata or {}).get("path"))
        same_version = bool(kept_id) and (mat.tags or {}).get(DATA_VERSION_TAG) == kept_id[:16]
        if same_version or (path and Path(path).resolve() == folder):
            return jsonable((mat.metadata or {}).get(LINEAGE_DIGEST_KEY)), entry.run_id
    return None


def record_problems(
    folder: Path, instance: dg.DagsterInstance | None, kept_id: str | None, notes: list[str]
) -> tuple[list[Discrepancy], bool]:
    """The lineage record against its sha256 beside it and in the instance's materialization metadata;
    and whether the instance had a record to compare with."""
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
    if instance is None:
        return problems, False
    found = recorded_digest(instance, folder, kept_id or "")
    if found is None:
        notes.append(
            f"the Dagster instance has no {EAGLE3_CHECKPOINT} materialization of {folder}: "
            "checked against lineage.sha256 only"
        )
        return problems, False
    if found[0] is None:
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
    return problems, True


def signature_problem(folder: Path, key: bytes) -> tuple[str, Discrepancy | None]:
    """("ok" | "missing" | "mismatch", the problem) of lineage.sig under ``key``."""
    matches = signature_matches(folder, key)
    if matches:
        return "ok", None
    if matches is None:
        detail = (
            "missing while a key is given: the checkpoint was kept without a lineage key, or the file was "
            "removed; to sign a record the Dagster instance confirms, run `eagle-assets lineage verify "
            "CKPT --sign` with the key and $DAGSTER_HOME set"
        )
        return "missing", Discrepancy(
            "signature", LINEAGE_SIGNATURE_FILE, folder / LINEAGE_SIGNATURE_FILE, "lineage", detail
        )
    detail = (
        "does not match lineage.json under this key: the record changed after it was signed (restore it "
        "from a trusted copy, or re-materialize the checkpoint), or it was signed with another key"
    )
    return "mismatch", Discrepancy(
        "signature", LINEAGE_SIGNATURE_FILE, folder / LINEAGE_SIGNATURE_FILE, "lineage", detail
    )


def checkpoint_problems(folder: Path, lineage: Mapping[str, Any], actual: str | None) -> list[Discrepancy]:
    """The folder's checkpoint id (``actual``, None when a model file is gone) against its name;
    training.json against the record."""
    if actual is None:
        return []  # a weights or config file is gone: named as vanished with the checkpoint's files
    problems = []
    # Kept folders are named by their checkpoint id (a changed weight file is named on its own below);
    # a user's copy under another name is fine.
    if re.fullmatch(r"[0-9a-f]{16}", folder.name) and folder.name != actual[:16]:
        problems.append(
            Discrepancy(
                "misnamed",
                ".",
                folder,
                EAGLE3_CHECKPOINT,
                f"the folder is named {folder.name} but its checkpoint id is {actual[:16]}",
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
