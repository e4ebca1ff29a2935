"""Crash-safe file writing and content hashing shared by every asset."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_assets.core.layout import CURRENT_FILE, MODEL_FILES, version_folder

# Large reads keep the per-chunk cost (a syscall, an update call) negligible beside the hashing itself.
HASH_CHUNK = 4 << 20
# One read buffer per thread, reused by every file_sha256 call on it: no allocation per file or chunk.
_hash_buffers = threading.local()


@contextmanager
def atomic_path(final: Path):
    """Yield a temporary path beside ``final``; rename it over ``final`` only if the block succeeds.

    A crash leaves either the old file or the new one, never a half-written file under the real name.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet(table: pa.Table, final: Path) -> Path:
    """Write a zstd Parquet file atomically."""
    with atomic_path(final) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return Path(final)


def write_json(obj, final: Path) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    return Path(final)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in HASH_CHUNK pieces into this thread's buffer. hashlib releases the GIL
    while it hashes a large piece, so threads calling this hash files in parallel."""
    view = getattr(_hash_buffers, "view", None)
    if view is None:
        view = _hash_buffers.view = memoryview(bytearray(HASH_CHUNK))
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(view):
            digest.update(view[:n])
    return digest.hexdigest()


def combined_hash(parts: Iterable[str | bytes]) -> str:
    """One sha256 over several parts, each length-prefixed so that boundaries matter."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def model_file_hashes(folder: Path) -> dict[str, str]:
    """The sha256 of the checkpoint's config and weights, by file name."""
    return {name: file_sha256(Path(folder) / name) for name in MODEL_FILES}


def hash_of_model_files(file_hashes: Mapping[str, str]) -> str:
    """The content hash of a checkpoint from its :func:`model_file_hashes` (the weights are large:
    each check that needs their sha256 takes it from there instead of reading them again)."""
    return combined_hash(f"{name}:{file_hashes[name]}" for name in MODEL_FILES)


def checkpoint_id(weights_hash: str, training_run: str) -> str:
    """A kept checkpoint's identity: its :func:`hash_of_model_files` and the training run that kept it. The
    folder's name and the asset's data version are its first 16 characters, so two runs that train identical
    weights each keep a folder and records of their own, and neither rewrites the other's."""
    return combined_hash((weights_hash, training_run))


def checkpoint_hash(folder: Path) -> str:
    """The content hash of a checkpoint: its config and weights."""
    return hash_of_model_files(model_file_hashes(folder))


def remove_stale_temporaries(folder: Path) -> int:
    """Delete ``.*.tmp`` files left by a crash; returns how many were removed."""
    removed = 0
    for tmp in Path(folder).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


def publish_version(folder: Path, version: str, write: Callable[[Path], object]) -> Path:
    """Publish ``version`` of a partition ``folder``: ``write(tmp)`` fills a temporary folder that is renamed
    to ``versions/<version>`` (a version already there is content-identical and kept as it is), then
    ``current.json`` names it. A crash leaves the previous version current; nothing published is rewritten."""
    final = version_folder(folder, version)
    if not final.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", suffix=".tmp", dir=final.parent))
        try:
            write(tmp)
            try:
                os.replace(tmp, final)
            except OSError:
                if not final.is_dir():  # else another writer published the same content first
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    write_json({"version": version}, Path(folder) / CURRENT_FILE)
    return final
