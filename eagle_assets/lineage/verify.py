"""Verifying a checkpoint's lineage: the record against its sha256 (beside it and, given the instance, in
the checkpoint materialization's metadata) and, given the key, against its signature (``lineage.sig``);
the checkpoint's content hash against its folder name and training.json; and the recorded artifacts.
Each artifact that changed or vanished is named.

Two tiers check the artifacts. The full tier (the default) rehashes every recorded file: exact. The quick
tier compares every file's size with the recorded one and rehashes a seeded random sample of them (and
every file recorded without a size), so an audit of terabytes takes seconds; the seed is reported, so a
run can be repeated. Both rehash the checkpoint's own config and weights, which the record checks need.
Files are hashed on a thread pool (hashlib releases the GIL for large reads), with the same result, in the
same order, as one file after another.

``root=...`` overrides the recorded storage root, so a moved data folder still verifies.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.files import checkpoint_id, hash_of_model_files
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    LINEAGE_FILE,
    MODEL_FILES,
    asset_folder,
    read_training_record,
)
from eagle_assets.lineage.hashing import (
    DEFAULT_WORKERS,
    ProgressCallback,
    artifact_changed,
    hash_in_pool,
    model_file,
)
from eagle_assets.lineage.record import (
    LineageError,
    read_lineage,
)
from eagle_assets.lineage.record_checks import (
    Discrepancy,
    checkpoint_problems,
    record_problems,
    signature_problem,
)
from eagle_assets.lineage.render import changed_line

FULL, QUICK = "full", "quick"
DEFAULT_SAMPLE = 32


@dataclass
class Verification:
    """What :func:`verify_lineage` found: ``problems`` empty = every check passed."""

    checked: int  # recorded artifacts checked (by hash, or in the quick tier by size and a sample's hashes)
    problems: list[Discrepancy]
    notes: list[str]  # checks that could not be made (e.g. the instance never recorded this checkpoint)
    tier: str = FULL
    seed: int | None = None  # the quick tier's sample seed
    sampled: int = 0  # the quick tier: files rehashed as the sample
    hashed_files: int = 0  # files read and hashed, the checkpoint's config and weights included
    hashed_bytes: int = 0
    seconds: float = 0.0
    against_instance: bool = False  # the record's sha256 was compared with the one Dagster recorded
    signature: str = "unchecked"  # "ok" | "missing" | "mismatch" | "unchecked" (no key given)


def _sized(artifact: Mapping[str, Any]) -> bool:
    """Whether the quick tier can check ``artifact`` by its size: a file recorded with one."""
    return "links" not in artifact and artifact.get("bytes") is not None


def _recorded_size(artifact: Mapping[str, Any]) -> int:
    return artifact.get("bytes") or 0


def verify_lineage(
    checkpoint_dir: str | Path,
    root: str | Path | None = None,
    instance: dg.DagsterInstance | None = None,
    *,
    quick: bool = False,
    sample: int = DEFAULT_SAMPLE,
    seed: int | None = None,
    key: bytes | None = None,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
) -> Verification:
    """Check the lineage record (against ``lineage.sha256``, given ``instance`` the sha256 Dagster
    recorded, given ``key`` its signature), the checkpoint's content hash and name, and the recorded
    artifacts: every hash recomputed, or with ``quick`` every size and the hashes of ``sample`` files
    drawn with ``seed`` (random when None; the result names it). ``root`` overrides the storage root
    recorded in lineage.json (a data folder that moved or was copied). ``workers`` threads hash files;
    ``progress`` is called with a :class:`HashProgress` a few times a second and at the end."""
    started = time.monotonic()
    folder = Path(checkpoint_dir)
    if not (folder / LINEAGE_FILE).is_file():
        read_lineage(folder)  # raises the clear "not a checkpoint folder" error
    workers = workers or DEFAULT_WORKERS
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    try:
        lineage, unreadable = read_lineage(folder), None
    except LineageError as exc:
        lineage, unreadable = None, exc
    entries: list[tuple[Path, Mapping[str, Any], str, bool]] = []  # where, artifact, asset, a model file
    if lineage is not None:
        base = Path(root) if root is not None else Path(lineage["storage_root"])
        entries = [(base / a["path"], a, a["asset"], False) for a in lineage["artifacts"]]
        entries += [
            (folder / f["path"], f, EAGLE3_CHECKPOINT, f["path"] in MODEL_FILES)
            for f in lineage.get("checkpoint_files", [])
        ]

    # Each entry's finding: settled now (the quick tier's size check), by a pool job, or after the pool
    # (the checkpoint's model files, whose hashes the pool computes once for every check that needs them).
    kinds: list[str | None] = [None] * len(entries)
    details = [""] * len(entries)
    settled: set[int] = set()
    chosen: list[int] = []
    if quick:
        seed = secrets.randbelow(2**32) if seed is None else seed
        # Drawn from the record alone (entries with a size), so a seed names the same sample on every run.
        sized = [i for i, (_, a, _, model) in enumerate(entries) if not model and _sized(a)]
        chosen = sorted(random.Random(seed).sample(sized, min(max(sample, 0), len(sized))))
        settled = set(sized) - set(chosen)
        for i in sorted(settled):
            where, artifact = entries[i][0], entries[i][1]
            if not where.is_file():
                kinds[i] = "vanished"
            elif (size := where.stat().st_size) != artifact["bytes"]:
                kinds[i], details[i] = "changed", f"{size} bytes, recorded {artifact['bytes']}"
    pooled = [i for i, entry in enumerate(entries) if not entry[3] and i not in settled]
    model_paths = [folder / name for name in MODEL_FILES]
    jobs: list[Callable[[], tuple[Any, int | None]]] = [lambda p=p: model_file(p) for p in model_paths]
    jobs += [lambda e=entries[i]: artifact_changed(e[0], e[1]) for i in pooled]
    expected = sum(p.stat().st_size for p in model_paths if p.is_file())
    expected += sum(_recorded_size(entries[i][1]) for i in pooled if "links" not in entries[i][1])
    results, tally = hash_in_pool(jobs, expected, workers, progress, started)

    model_hashes = {p.name: sha for p, sha in zip(model_paths, results[: len(model_paths)]) if sha is not None}
    for i, kind in zip(pooled, results[len(model_paths) :]):
        kinds[i] = kind
    for i, (where, artifact, _, model) in enumerate(entries):
        if model:
            kinds[i], hashed = artifact_changed(where, artifact, model_hashes.get(artifact["path"]))
            if hashed is not None:  # the file appeared after the pool found it gone
                tally.count(hashed)

    changed = lineage.get("changed_while_training", []) if lineage is not None else []
    notes = online_notes(lineage) if lineage is not None else []
    notes += [changed_line(c) for c in changed if c["trained_on_stored"]]
    kept_id = None  # the checkpoint id: the folder's name and its materializations' data version
    if len(model_hashes) == len(MODEL_FILES):
        training_run = read_training_record(folder).get("training_run", "")
        kept_id = checkpoint_id(hash_of_model_files(model_hashes), training_run)
    problems, against_instance = record_problems(folder, instance, kept_id, notes)
    signature = "unchecked"
    if key is not None:
        signature, problem = signature_problem(folder, key)
        problems += [problem] if problem else []
    result = Verification(
        0,
        problems,
        notes,
        tier=QUICK if quick else FULL,
        seed=seed if quick else None,
        sampled=len(chosen),
        against_instance=against_instance,
        signature=signature,
    )
    if lineage is None:
        if not problems:
            raise unreadable
        problems.append(Discrepancy("changed", LINEAGE_FILE, folder / LINEAGE_FILE, "lineage", str(unreadable)))
    else:
        problems += checkpoint_problems(folder, lineage, kept_id)
        problems += [
            Discrepancy(
                "vanished",
                f"{c['asset']}/{c['partition']}",
                asset_folder(base, c["asset"], c["partition"]),
                c["asset"],
                changed_line(c),
            )
            for c in changed
            if not c["trained_on_stored"]
        ]
        problems += [
            Discrepancy(kind, artifact["path"], where, asset, detail)
            for (where, artifact, asset, _), kind, detail in zip(entries, kinds, details)
            if kind
        ]
        result.checked = len(entries)
    result.hashed_files, result.hashed_bytes = tally.hashed_files, tally.hashed_bytes
    result.seconds = time.monotonic() - started
    return result


def online_notes(lineage: Mapping[str, Any]) -> list[str]:
    """What verify cannot check of a checkpoint trained with ``features: online``: each partition's features
    were computed by the extraction server while training and deleted once loaded, so only their rows (the
    ``token_sequences`` files) and any stored files that were linked are on disk to check."""
    notes = []
    for partition, features in sorted((lineage.get("hidden_states") or {}).items()):
        if not isinstance(features, Mapping) or features.get("features") != "online":
            continue
        linked = "stored files were linked for some rows" if features.get("stored") else "none was stored"
        notes.append(
            f"hidden_states[{partition}]: features computed online while training and never stored "
            f"({features.get('generated_rows')} rows generated in all; vLLM {features.get('vllm_version')}, "
            f"{features.get('connector')}, layers {features.get('layer_ids')}, {features.get('dtype')}; "
            f"{linked}): their rows, token_sequences {features.get('token_sequences_version')}, are checked, "
            "the features themselves cannot be"
        )
    return notes


def summary_line(result: Verification) -> str:
    """One line: the tier, what was checked and hashed, how fast."""
    rate = result.hashed_bytes / 1e6 / result.seconds if result.seconds > 0 else 0.0
    tier = (
        f"quick tier (sizes of all, sha256 of {result.sampled} sampled, seed {result.seed}: "
        f"--quick --sample {result.sampled} --seed {result.seed} repeats it)"
        if result.tier == QUICK
        else "full tier (every sha256)"
    )
    return (
        f"{tier}: {result.checked} artifacts checked; {result.hashed_files} files hashed, "
        f"{result.hashed_bytes / 1e6:.1f} MB in {result.seconds:.2f} s, {rate:.1f} MB/s"
    )
