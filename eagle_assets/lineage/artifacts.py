"""The stored files a checkpoint's lineage records, with their sha256: the current version of each upstream
asset partition (reasoning_samples: the current recipe's sample set) and the speculators training folder.

Published versions and recipe folders are never rewritten, so these paths stay valid, and verifiable,
when a later materialization publishes a new version beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow.parquet as pq

from eagle_assets.core.layout import (
    HIDDEN_STATES,
    INDEX_FILE,
    PER_DATASET_STAGES,
    TRAINING_DATA,
    TRAINING_LINKS,
    UNPUBLISHED,
    asset_folder,
    current_version,
    published_kind,
    version_folder,
)
from eagle_assets.lineage.record import file_entry, links_entry


def _stored_files(folder: Path) -> Iterable[Path]:
    """Files under ``folder``, temporaries (``.name.tmp``) and hidden files or folders excluded."""
    files = folder.rglob("*") if folder.is_dir() else ()
    return sorted(p for p in files if p.is_file() and not any(n.startswith(".") for n in p.relative_to(folder).parts))


def stored_folder(root: Path, asset: str, partition: str, version: str | None) -> Path:
    """The folder of ``version`` (reasoning_samples: a recipe id) of ``asset[partition]``; None: one that never
    exists (nothing published)."""
    return version_folder(asset_folder(root, asset, partition), version or UNPUBLISHED, published_kind(asset))


def stored_versions(root: Path, partitions: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """asset -> partition -> its current version (reasoning_samples: recipe id), None before the first one."""
    return {
        asset: {p: current_version(asset_folder(root, asset, p)) for p in partitions} for asset in PER_DATASET_STAGES
    }


def upstream_artifacts(root: Path, versions: Mapping[str, Mapping[str, str | None]]) -> list[dict]:
    """Every file of the given version (reasoning_samples: recipe) of each upstream asset partition
    (:func:`stored_versions`) with its sha256, paths relative to ``root``: files no later materialization
    rewrites.

    Hidden-state tensors are listed from the version's index with the sha256 their writer recorded
    (hashing terabytes again here would be the slow part of a production checkpoint); ``verify``
    rehashes them.
    """
    root = Path(root)
    found: list[dict] = []
    for asset, by_partition in versions.items():
        for partition, version in by_partition.items():
            stored = stored_folder(root, asset, partition, version)
            found += [file_entry(root, p, asset, partition) for p in _stored_files(stored)]
            if asset == HIDDEN_STATES and (stored / INDEX_FILE).exists():
                rows = pq.read_table(stored / INDEX_FILE, columns=["file", "sha256"]).to_pylist()
                files = {r["file"]: r["sha256"] for r in rows}  # rows sharing content share a file
                folder = asset_folder(root, asset, partition)  # what the index's paths are relative to
                found += [file_entry(root, folder / f, asset, partition, sha) for f, sha in sorted(files.items())]
    return found


def training_data_artifacts(root: Path, folder: Path) -> list[dict]:
    """The speculators training folder (rows, Arrow data, token counts, vocab maps) with every file's
    sha256; its hidden-state links are one entry whose hash covers each link's name and target."""
    root, folder = Path(root), Path(folder)
    found = [
        file_entry(root, p, TRAINING_DATA, None)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    ]
    links = folder / TRAINING_LINKS
    if links.is_dir():
        found.append(links_entry(root, links, TRAINING_DATA))
    return found
