"""Hashing a lineage's files for ``lineage verify``: on a thread pool (hashlib releases the GIL for large
reads), each job's result in job order as one file after another would give, with progress for a display."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_assets.core.files import file_sha256
from eagle_assets.lineage.record import links_hash

# Enough reads in flight to keep a network or RAID volume busy; hashing itself needs one thread per core.
DEFAULT_WORKERS = min(32, 4 * (os.cpu_count() or 1))
PROGRESS_INTERVAL_S = 0.1


@dataclass(frozen=True)
class HashProgress:
    """Where the hashing stands, for a progress display (see ``verify_lineage(progress=...)``)."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int  # as recorded (or stat'ed): a file that changed size makes it approximate
    seconds: float


ProgressCallback = Callable[[HashProgress], None]


def artifact_changed(
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


def model_file(path: Path) -> tuple[str | None, int | None]:
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


def hash_in_pool(
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
