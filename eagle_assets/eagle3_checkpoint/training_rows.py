"""The rows a training folder is built from: a partition's current ``token_sequences`` rows in the
``train`` and ``validation`` splits of the current prompts table, and where each row's hidden states
come from.

Stored features (:func:`stored_rows`) are the files of the current ``hidden_states`` index. Online
features (:func:`online_rows`) keep every row: a row gets the file a ``hidden_states`` materialization
already holds for it (its content id, from the row's tokens and the server's verifier, layers and dtype,
names the file, so a file of other tokens or another capture never matches), and the extraction server
computes the rest while the trainer runs. Rows without a file have a null ``file``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.layout import HIDDEN_STATES, TRAIN, VALIDATION, asset_folder, index_file, sequences_file
from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest, TrainingDataError
from eagle_assets.hidden_states.files import content_id, relative_path
from eagle_assets.prompts.splits import read_current_splits
from eagle_assets.token_sequences.build import row_keys


def _require(path: Path, asset: str, partition: str) -> None:
    if not path.exists():
        raise TrainingDataError(f"{path} is missing: materialize {asset} for partition '{partition}' first")


def _split_rows(storage_root: Path, partition: str) -> pa.Table:
    """The partition's current token_sequences rows with their current split and problem group."""
    try:
        current = read_current_splits(storage_root, partition)
    except FileNotFoundError as err:
        raise TrainingDataError(str(err)) from None
    seqs = pq.read_table(
        sequences_file(storage_root, partition), columns=["prompt_id", "turn", "input_ids", "loss_mask", "seq_len"]
    )
    labels = [current.get(pid, (None, None)) for pid in seqs["prompt_id"].to_pylist()]
    seqs = seqs.append_column("split", pa.array([split for split, _ in labels], pa.string()))
    seqs = seqs.append_column("group_id", pa.array([group for _, group in labels], pa.string()))
    return seqs.filter(pc.is_in(seqs["split"], pa.array([TRAIN, VALIDATION])))


def _with_source(rows: pa.Table, partition: str, hs_folder: Path) -> pa.Table:
    rows = rows.append_column("partition", pa.array([partition] * len(rows), pa.string()))
    return rows.append_column("tensor_root", pa.array([str(hs_folder)] * len(rows), pa.string()))


def stored_rows(storage_root: Path, partition: str) -> tuple[pa.Table, FeatureManifest]:
    """The rows joined with the current hidden_states index (null ``content_id`` where it has none), and
    that materialization's manifest."""
    seq_path, index_path = sequences_file(storage_root, partition), index_file(storage_root, partition)
    hs_folder = asset_folder(storage_root, HIDDEN_STATES, partition)
    for path, asset in ((seq_path, "token_sequences"), (index_path, "hidden_states")):
        _require(path, asset, partition)
    manifest = FeatureManifest.read(hs_folder)
    seqs = _split_rows(storage_root, partition)
    index = pq.read_table(index_path, columns=["prompt_id", "turn", "content_id", "file", "seq_len"])
    # A left join by row key (Arrow's join cannot carry list columns): null where no hidden states.
    matched = index.take(pc.index_in(row_keys(seqs), value_set=row_keys(index)))
    joined = seqs
    for name, column in (("content_id", "content_id"), ("file", "file"), ("hs_seq_len", "seq_len")):
        joined = joined.append_column(name, matched[column])
    return _with_source(joined, partition, hs_folder), manifest


def online_rows(storage_root: Path, partition: str, manifest: FeatureManifest) -> pa.Table:
    """Every row, with the stored file of the features ``manifest`` describes where one exists."""
    _require(sequences_file(storage_root, partition), "token_sequences", partition)
    seqs = _split_rows(storage_root, partition)
    hs_folder = asset_folder(storage_root, HIDDEN_STATES, partition)
    cids = [
        content_id(ids, manifest.verifier_id, manifest.layer_ids, manifest.dtype)
        for ids in seqs["input_ids"].to_pylist()
    ]
    files = [relative_path(cid) if (hs_folder / relative_path(cid)).is_file() else None for cid in cids]
    lengths = seqs["seq_len"].to_pylist()
    joined = seqs.append_column("content_id", pa.array(cids, pa.string()))
    joined = joined.append_column("file", pa.array(files, pa.string()))
    stored_lengths = [n if f is not None else None for n, f in zip(lengths, files, strict=True)]
    joined = joined.append_column("hs_seq_len", pa.array(stored_lengths, seqs.schema.field("seq_len").type))
    return _with_source(joined, partition, hs_folder)
