"""The lineage record: ``lineage.json`` in a checkpoint folder and its sha256 beside it (``lineage.sha256``).

Its format is defined here, for :mod:`.collect` that fills it and :mod:`.verify` that checks it: the
required keys, the entry of one stored file or of a folder of links, Dagster metadata values as JSON,
and the materialization keys lineage reads. :func:`write_lineage` adds the checkpoint's own files
(relative to the checkpoint folder) and content hash to a collected lineage and writes both files, and
``lineage.sig`` when a lineage key is configured (:func:`lineage_key`); :func:`read_lineage` reads the
record back and refuses one that lacks a required key.

The signature is an HMAC-SHA256 of lineage.json's bytes. lineage.sha256 alone only shows that the record is
self-consistent: whoever edits lineage.json can rewrite it too. The Dagster instance's copy of that sha256,
or a signature checked with the key, is what catches such a forgery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle_assets.core.files import combined_hash, file_sha256, hash_of_model_files, write_json
from eagle_assets.core.layout import LINEAGE_DIGEST_FILE, LINEAGE_FILE, LINEAGE_SIGNATURE_FILE, MODEL_FILES

# The checkpoint materialization's metadata key holding the same sha256.
LINEAGE_DIGEST_KEY = "lineage_sha256"
# The materialization tag holding the data version Dagster recorded.
DATA_VERSION_TAG = "dagster/data_version"
LINEAGE_FORMAT = 1
REQUIRED_KEYS = (
    "storage_root",
    "partitions",
    "prompt_sources",
    "generation",
    "tokenization",
    "hidden_states",
    "training",
    "run_ids",
    "dagster",
    "artifacts",
    "checkpoint_files",
)
# The lineage key: the key itself, or a file holding it (surrounding whitespace stripped).
KEY_ENV = "EAGLE_ASSETS_LINEAGE_KEY"
KEY_FILE_ENV = "EAGLE_ASSETS_LINEAGE_KEY_FILE"
SIGNATURE_SCHEME = "hmac-sha256"
# The files of a checkpoint folder that make up its lineage record, not its content.
RECORD_FILES = (LINEAGE_FILE, LINEAGE_DIGEST_FILE, LINEAGE_SIGNATURE_FILE)


class LineageError(ValueError):
    """A checkpoint folder without a readable lineage.json."""


def jsonable(value: Any) -> Any:
    """A metadata value as JSON-friendly data (MetadataValue objects carry it in ``.value``)."""
    value = getattr(value, "value", value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


def file_entry(root: Path, path: Path, asset: str, partition: str | None, sha256: str | None = None) -> dict:
    """One stored file, its path relative to ``root``; ``sha256`` given = the hash its writer recorded
    (the file may be gone already, which ``verify`` then reports)."""
    return {
        "asset": asset,
        "partition": partition,
        "path": path.relative_to(root).as_posix(),
        "bytes": path.stat().st_size if path.is_file() else None,
        "sha256": sha256 or file_sha256(path),
    }


def links_entry(root: Path, folder: Path, asset: str) -> dict:
    """A folder of links as one entry, its hash covering each link's name and target."""
    return {
        "asset": asset,
        "partition": None,
        "path": folder.relative_to(root).as_posix(),
        "bytes": None,
        "links": sum(1 for _ in folder.iterdir()),
        "sha256": links_hash(folder),
    }


def links_hash(folder: Path) -> str:
    """The hash of a links entry: each link's name and target, in name order."""
    return combined_hash(f"{p.name}->{os.readlink(p)}" for p in sorted(folder.iterdir()) if p.is_symlink())


def read_json(path: Path) -> dict:
    """The JSON object in ``path``; an empty dict when the file is missing or not valid JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def lineage_key(key_file: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The lineage key: ``key_file``'s contents, else ``$EAGLE_ASSETS_LINEAGE_KEY_FILE``'s, else
    ``$EAGLE_ASSETS_LINEAGE_KEY`` itself, as ``environ`` (this process's environment unless given) holds them;
    None when none is configured. An empty key is refused (it would sign with nothing), as is a key file that
    cannot be read."""
    key_file = key_file or environ.get(KEY_FILE_ENV) or None
    if key_file is not None:
        try:
            key = Path(key_file).read_bytes().strip()
        except OSError as exc:
            raise LineageError(f"the lineage key file {key_file} cannot be read: {exc.strerror}") from None
        source = str(key_file)
    elif KEY_ENV in environ:
        key, source = environ[KEY_ENV].strip().encode(), f"${KEY_ENV}"
    else:
        return None
    if not key:
        raise LineageError(f"the lineage key in {source} is empty")
    return key


def lineage_signature(record: bytes, key: bytes) -> str:
    """The signature line of ``record`` (lineage.json's bytes), as lineage.sig holds it."""
    return f"{SIGNATURE_SCHEME} {hmac.new(key, record, hashlib.sha256).hexdigest()}"


def signature_matches(checkpoint_dir: str | Path, key: bytes) -> bool | None:
    """Whether lineage.sig signs lineage.json under ``key`` (compared in constant time); None when the
    folder has no lineage.sig."""
    folder = Path(checkpoint_dir)
    try:
        stored = (folder / LINEAGE_SIGNATURE_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    expected = lineage_signature((folder / LINEAGE_FILE).read_bytes(), key)
    return hmac.compare_digest(stored.encode(), expected.encode())


def sign_lineage(checkpoint_dir: str | Path, key: bytes) -> Path:
    """Write ``lineage.sig``: the HMAC-SHA256 of the folder's lineage.json under ``key``."""
    folder = Path(checkpoint_dir)
    path = folder / LINEAGE_SIGNATURE_FILE
    path.write_text(lineage_signature((folder / LINEAGE_FILE).read_bytes(), key) + "\n")
    return path


def write_lineage(
    checkpoint_dir: str | Path,
    lineage: Mapping[str, Any],
    model_hashes: Mapping[str, str] | None = None,
    key: bytes | None = None,
) -> str:
    """Write ``lineage.json`` into the checkpoint, adding the hashes of the checkpoint's own files and
    its content hash, then ``lineage.sha256`` beside it (and ``lineage.sig`` given a ``key``); returns
    that sha256. ``model_hashes``: the sha256 of the model files where the caller has them already
    (``keep_checkpoint`` hashed what it copied), so the weights are not read again."""
    folder = Path(checkpoint_dir)
    known = dict(model_hashes or {})
    own = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name not in RECORD_FILES and not p.name.startswith("."):
            rel = p.relative_to(folder).as_posix()
            own.append({"path": rel, "bytes": p.stat().st_size, "sha256": known.get(rel) or file_sha256(p)})
    hashes = {f["path"]: f["sha256"] for f in own if f["path"] in MODEL_FILES}
    if missing := [name for name in MODEL_FILES if name not in hashes]:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}: not a checkpoint folder speculators saved")
    path = write_json(
        {**lineage, "checkpoint_files": own, "checkpoint_hash": hash_of_model_files(hashes)}, folder / LINEAGE_FILE
    )
    digest = file_sha256(path)
    (folder / LINEAGE_DIGEST_FILE).write_text(f"{digest}  {LINEAGE_FILE}\n")
    if key is not None:
        sign_lineage(folder, key)
    return digest


def read_lineage(checkpoint_dir: str | Path) -> dict:
    path = Path(checkpoint_dir) / LINEAGE_FILE
    if not path.is_file():
        raise LineageError(
            f"{path} does not exist: is {checkpoint_dir} a checkpoint folder written by eagle3_checkpoint?"
        )
    try:
        lineage = json.loads(path.read_text())
    except ValueError as exc:
        raise LineageError(f"{path} is not valid JSON ({exc}); the lineage record is damaged") from None
    missing = [key for key in REQUIRED_KEYS if key not in lineage]
    if missing:
        raise LineageError(
            f"{path} lacks {', '.join(missing)}: not written by this version's write_lineage, or edited by hand"
        )
    return lineage
