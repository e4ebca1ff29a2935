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

import json
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.files import file_sha256, hash_of_model_files
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    LINEAGE_DIGEST_FILE,
    LINEAGE_FILE,
    LINEAGE_SIGNATURE_FILE,
    MODEL_FILES,
)
from eagle_assets.lineage.record import (
    DATA_VERSION_TAG,
    LINEAGE_DIGEST_KEY,
    LineageError,
    jsonable,
    links_hash,
    read_json,
    read_lineage,
    signature_matches,
)

FULL, QUICK = "full", "quick"
# Enough reads in flight to keep a network or RAID volume busy; hashing itself needs one thread per core.
DEFAULT_WORKERS = min(32, 4 * (os.cpu_count() or 1))
DEFAULT_SAMPLE = 32
PROGRESS_INTERVAL_S = 0.1


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


@dataclass(frozen=True)
class HashProgress:
    """Where the hashing stands, for a progress display (see ``verify_lineage(progress=...)``)."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int  # as recorded (or stat'ed): a file that changed size makes it approximate
    seconds: float


ProgressCallback = Callable[[HashProgress], None]


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


def _record_problems(
    folder: Path, instance: dg.DagsterInstance | None, content_hash: str | None, notes: list[str]
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
    found = recorded_digest(instance, folder, content_hash or "")
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


def _signature_problem(folder: Path, key: bytes) -> tuple[str, Discrepancy | None]:
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


def _artifact_changed(
    where: Path, artifact: Mapping[str, Any], sha256: str | None = None
) -> tuple[str | None, int | None]:
    """("vanished" | "changed" | None (intact), bytes hashed or None) for one recorded artifact;
    ``sha256``: the file's, where already computed."""
    if "links" in artifact:
        return ("changed" if not where.is_dir() or links_hash(where) != artifact["sha256"] else None), None
    if not where.is_file():
        return "vanished", None
    if sha256:
        return ("changed" if sha256 != artifact["sha256"] else None), None
    size = where.stat().st_size
    return ("changed" if file_sha256(where) != artifact["sha256"] else None), size


def _model_file(path: Path) -> tuple[str | None, int | None]:
    """(sha256, bytes) of one of the checkpoint's config and weights, (None, None) when it is gone."""
    try:
        size = path.stat().st_size
        return file_sha256(path), size
    except OSError:
        return None, None


class _Tally:
    """Files and bytes done by the pool's workers, read by the calling thread for progress."""

    def __init__(self, jobs: int) -> None:
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.jobs, self.done, self.hashed_files, self.hashed_bytes = jobs, 0, 0, 0
        if not jobs:
            self.finished.set()

    def count(self, hashed: int | None) -> None:
        with self.lock:
            self.done += 1
            if hashed is not None:
                self.hashed_files += 1
                self.hashed_bytes += hashed
            if self.done == self.jobs:
                self.finished.set()


def _run(
    jobs: Sequence[Callable[[], tuple[Any, int | None]]],
    expected_bytes: int,
    workers: int,
    progress: ProgressCallback | None,
    started: float,
) -> tuple[list[Any], _Tally]:
    """Each job's result, in job order, run on ``workers`` threads; a job returns (result, bytes it hashed
    or None). ``progress`` is called on this thread every PROGRESS_INTERVAL_S and once at the end."""
    tally = _Tally(len(jobs))

    def run(job: Callable[[], tuple[Any, int | None]]) -> Any:
        hashed = None
        try:
            result, hashed = job()
            return result
        finally:
            tally.count(hashed)

    def report() -> None:
        if progress is not None:
            with tally.lock:
                done, nbytes = tally.done, tally.hashed_bytes
            progress(HashProgress(done, len(jobs), nbytes, expected_bytes, time.monotonic() - started))

    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs))), thread_name_prefix="lineage-hash")
    try:
        futures = [pool.submit(run, job) for job in jobs]
        while not tally.finished.wait(PROGRESS_INTERVAL_S if progress is not None else None):
            report()
        report()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: stop after the files being read
        raise
    pool.shutdown(wait=True)
    return [f.result() for f in futures], tally  # the first failure in entry order, as one by one would


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
    jobs: list[Callable[[], tuple[Any, int | None]]] = [lambda p=p: _model_file(p) for p in model_paths]
    jobs += [lambda e=entries[i]: _artifact_changed(e[0], e[1]) for i in pooled]
    expected = sum(p.stat().st_size for p in model_paths if p.is_file())
    expected += sum(_recorded_size(entries[i][1]) for i in pooled if "links" not in entries[i][1])
    results, tally = _run(jobs, expected, workers, progress, started)

    model_hashes = {p.name: sha for p, sha in zip(model_paths, results[: len(model_paths)]) if sha is not None}
    for i, kind in zip(pooled, results[len(model_paths) :]):
        kinds[i] = kind
    for i, (where, artifact, _, model) in enumerate(entries):
        if model:
            kinds[i], hashed = _artifact_changed(where, artifact, model_hashes.get(artifact["path"]))
            if hashed is not None:  # the file appeared after the pool found it gone
                tally.count(hashed)

    notes: list[str] = []
    content_hash = hash_of_model_files(model_hashes) if len(model_hashes) == len(MODEL_FILES) else None
    problems, against_instance = _record_problems(folder, instance, content_hash, notes)
    signature = "unchecked"
    if key is not None:
        signature, problem = _signature_problem(folder, key)
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
        problems += _checkpoint_problems(folder, lineage, content_hash)
        problems += [
            Discrepancy(kind, artifact["path"], where, asset, detail)
            for (where, artifact, asset, _), kind, detail in zip(entries, kinds, details)
            if kind
        ]
        result.checked = len(entries)
    result.hashed_files, result.hashed_bytes = tally.hashed_files, tally.hashed_bytes
    result.seconds = time.monotonic() - started
    return result


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
