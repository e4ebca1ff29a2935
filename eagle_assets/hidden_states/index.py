"""The index and manifest of one extraction, published as a version folder of the partition.

``versions/<data version>/index.parquet`` maps each row to its tensor file (``file`` relative to the
partition folder: the tensors are shared by every version in ``tensors/``) with that file's sha256;
``manifest.json`` beside it records the verifier, layers and storage dtype. The version is a content hash
of both, so a published folder is never rewritten and ``current.json`` names the one readers see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash, publish_version, write_json, write_parquet
from eagle_assets.core.layout import BF16, FP8, INDEX_FILE, MANIFEST_FILE, current_folder
from eagle_assets.core.tables import table_version
from eagle_assets.hidden_states.files import INDEX_SCHEMA, SCALES_KEY, relative_path

FORMATS = {
    BF16: "speculators: hidden_states [seq, n_aux+1, H] bf16 + token_ids [seq] int64",
    FP8: "hs-connectors fp8 (speculators' `fp8` backend): hidden_states [seq, n_aux+1, H] float8_e4m3fn + "
    f"{SCALES_KEY} [seq, 1, 1] fp32 (per token) + token_ids [seq] int64",
}


def index_table(rows: pa.Table, cids: list[str], hashes: dict[str, str]) -> pa.Table:
    """``index.parquet``: one entry per row, naming the file that holds its states and that file's sha256."""
    return pa.table(
        {
            "prompt_id": rows["prompt_id"],
            "turn": rows["turn"],
            "content_id": cids,
            "file": [relative_path(c) for c in cids],
            "seq_len": rows["seq_len"],
            "sha256": [hashes[c] for c in cids],
        },
        schema=INDEX_SCHEMA,
    )


def manifest_of(
    verifier: dict, layer_ids: list[int], hidden_size: int, feature_dtype: str, files: int, tokens: int
) -> dict:
    """``manifest.json``: the verifier (``backend.describe``) and layers the files hold, and their format."""
    return {
        "verifier": verifier,
        "layer_ids": layer_ids,
        "aux_layer_ids": layer_ids[:-1],
        "final_layer_id": layer_ids[-1],
        "hidden_size": hidden_size,
        "dtype": feature_dtype,
        "format": FORMATS[feature_dtype],
        "files": files,
        "tokens": tokens,
    }


def features_version(index: pa.Table, manifest: dict) -> str:
    """The data version and version folder name: a content hash of all the folder holds (the index, whose
    sha256 column covers the tensors, and the manifest), so two contents never share a version."""
    return combined_hash([table_version(index, index.column_names), json.dumps(manifest, sort_keys=True)])[:16]


def publish_index(folder: Path, index: pa.Table, manifest: dict) -> tuple[Path, str]:
    """Publish ``index`` and ``manifest`` as a version of the partition ``folder``; (version folder, version)."""
    version = features_version(index, manifest)

    def write(tmp: Path) -> None:
        write_parquet(index, tmp / INDEX_FILE)
        write_json(manifest, tmp / MANIFEST_FILE)

    return publish_version(folder, version, write), version


def indexed_hashes(folder: Path) -> dict[str, str]:
    """content id -> sha256 of the files the partition ``folder``'s current index lists (a resume need not
    re-read them)."""
    index = current_folder(folder) / INDEX_FILE
    if not index.exists():
        return {}
    table = pq.read_table(index, columns=["content_id", "sha256"])
    return dict(zip(table["content_id"].to_pylist(), table["sha256"].to_pylist()))
