"""A speculators training folder built from the ``token_sequences`` and ``hidden_states`` partitions.

speculators' ``train`` reads one folder (``--data-path``):

- an Arrow dataset (``datasets.save_to_disk``, torch format) with ``input_ids``, ``loss_mask``, ``seq_len``;
- ``hidden_states/hs_<row>.safetensors`` for every row, whose ``token_ids`` equal the row's ``input_ids``;
- ``token_freq.pt``: counts of the supervised (loss-mask 1) tokens, for the draft vocabulary.

Here the hidden-state files are *relative symlinks* to the tensors the ``hidden_states`` asset wrote
(no tensor is copied), so a folder costs a few KB per row. Rows are the ``train`` split of every chosen
partition, then its ``validation`` split, each ordered by a hash of the prompt id; the splits are read
from the *current* prompts table (``eagle_assets.prompts.splits``), never from labels written at capture time.
speculators validates on the dataset's tail (``--train-data-ratio``): :attr:`TrainingData.train_data_ratio`
puts that boundary exactly between the two splits, so early stopping and the best epoch see only the
``validation`` problems and nothing of ``heldout``. The folder is named by a hash of its content and
built atomically, so a rebuild with the same inputs is a no-op. ``rows.parquet`` records which prompt,
split, problem group and tensor file each row came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash, write_parquet
from eagle_assets.core.layout import (
    HIDDEN_STATES,
    MANIFEST_FILE,
    TRAIN,
    VALIDATION,
    asset_folder,
    current_folder,
    index_file,
    sequences_file,
)
from eagle_assets.prompts.splits import read_current_splits
from eagle_assets.token_sequences.build import row_keys

COMPLETE_MARKER = ".complete"
# safetensors' dtype names -> the manifest's storage dtypes (hidden_state_files.FEATURE_DTYPES).
STORED_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "fp8"}


class TrainingDataError(ValueError):
    """Upstream features are missing or inconsistent; the message names the partition/row and the fix."""


@dataclass(frozen=True)
class FeatureManifest:
    """What the ``hidden_states`` asset recorded about the verifier it captured."""

    verifier_path: str
    verifier_id: str
    backend: str
    layer_ids: list[int]  # captured layers in file order: the auxiliary ids, then the final layer's
    hidden_size: int
    dtype: str

    @property
    def aux_layer_ids(self) -> list[int]:
        return self.layer_ids[:-1]

    @classmethod
    def read(cls, folder: Path) -> FeatureManifest:
        """Parse the ``manifest.json`` of the ``hidden_states`` partition ``folder``'s current version."""
        path = current_folder(folder) / MANIFEST_FILE
        if not path.exists():
            raise TrainingDataError(f"{path} is missing: materialize the hidden_states partition first")
        raw = json.loads(path.read_text())
        try:
            verifier = raw["verifier"]
            return cls(
                verifier_path=str(verifier["model_path"]),
                verifier_id=str(verifier["identity"]),
                backend=str(verifier["backend"]),
                layer_ids=[int(i) for i in raw["layer_ids"]],
                hidden_size=int(raw["hidden_size"]),
                dtype=str(raw["dtype"]),
            )
        except (KeyError, TypeError) as missing:
            raise TrainingDataError(f"{path} lacks field {missing}: re-materialize hidden_states") from None

    def identity(self) -> tuple:
        return (self.verifier_id, tuple(self.layer_ids), self.hidden_size, self.dtype)


@dataclass(frozen=True)
class TrainingData:
    """A built training folder and what went into it."""

    path: Path
    manifest: FeatureManifest
    partitions: list[str]
    num_rows: int
    num_validation_rows: int  # the dataset's tail: the validation split's rows
    num_tokens: int
    num_supervised_tokens: int
    skipped_without_hidden_states: int
    skipped_unsupervised: int
    content_hash: str

    @property
    def train_data_ratio(self) -> float:
        """speculators' ``--train-data-ratio``: it splits at ``int(rows * ratio)``, so half a row past the
        last train row lands the boundary exactly there, whatever the float rounding."""
        return (self.num_rows - self.num_validation_rows + 0.5) / self.num_rows


def _read_partition(storage_root: Path, partition: str) -> tuple[pa.Table, FeatureManifest]:
    seq_path, index_path = sequences_file(storage_root, partition), index_file(storage_root, partition)
    hs_folder = asset_folder(storage_root, HIDDEN_STATES, partition)
    for path, asset in ((seq_path, "token_sequences"), (index_path, "hidden_states")):
        if not path.exists():
            raise TrainingDataError(f"{path} is missing: materialize {asset} for partition '{partition}' first")
    manifest = FeatureManifest.read(hs_folder)
    try:
        current = read_current_splits(storage_root, partition)
    except FileNotFoundError as err:
        raise TrainingDataError(str(err)) from None
    seqs = pq.read_table(seq_path, columns=["prompt_id", "turn", "input_ids", "loss_mask", "seq_len"])
    labels = [current.get(pid, (None, None)) for pid in seqs["prompt_id"].to_pylist()]
    seqs = seqs.append_column("split", pa.array([split for split, _ in labels], pa.string()))
    seqs = seqs.append_column("group_id", pa.array([group for _, group in labels], pa.string()))
    seqs = seqs.filter(pc.is_in(seqs["split"], pa.array([TRAIN, VALIDATION])))
    index = pq.read_table(index_path, columns=["prompt_id", "turn", "content_id", "file", "seq_len"])
    # A left join by row key (Arrow's join cannot carry list columns): null where no hidden states.
    matched = index.take(pc.index_in(row_keys(seqs), value_set=row_keys(index)))
    joined = seqs
    for name, column in (("content_id", "content_id"), ("file", "file"), ("hs_seq_len", "seq_len")):
        joined = joined.append_column(name, matched[column])
    tensor_dir = str(hs_folder)
    joined = joined.append_column("partition", pa.array([partition] * len(joined), pa.string()))
    joined = joined.append_column("tensor_root", pa.array([tensor_dir] * len(joined), pa.string()))
    return joined, manifest


def _check_rows(rows: pa.Table) -> None:
    mismatch = pc.not_equal(rows["seq_len"], rows["hs_seq_len"])
    if pc.any(mismatch).as_py():
        bad = rows.filter(mismatch).slice(0, 3).to_pylist()
        names = ", ".join(f"{r['partition']}/{r['prompt_id']} ({r['seq_len']} vs {r['hs_seq_len']})" for r in bad)
        raise TrainingDataError(
            f"token_sequences and hidden_states disagree on seq_len for {pc.sum(mismatch).as_py()} rows, "
            f"e.g. {names}: re-materialize hidden_states for those partitions"
        )


def _per_row_sum(column: pa.ChunkedArray) -> np.ndarray:
    lists = column.combine_chunks()
    offsets = lists.offsets.to_numpy()
    cumulative = np.concatenate([[0], np.cumsum(lists.values.to_numpy(zero_copy_only=False), dtype=np.int64)])
    return cumulative[offsets[1:]] - cumulative[offsets[:-1]]


def _supervised_counts(rows: pa.Table) -> tuple[dict[int, int], int]:
    ids = pc.list_flatten(rows["input_ids"]).to_numpy(zero_copy_only=False)
    mask = pc.list_flatten(rows["loss_mask"]).to_numpy(zero_copy_only=False).astype(bool)
    tokens, counts = np.unique(ids[mask], return_counts=True)
    return dict(zip(tokens.tolist(), counts.tolist(), strict=True)), int(mask.sum())


def _check_tensor_file(path: Path, row: dict, manifest: FeatureManifest) -> None:
    from safetensors import safe_open

    if not path.exists():
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) is missing: re-materialize hidden_states"
        )
    with safe_open(str(path), framework="pt") as fh:
        states = fh.get_slice("hidden_states")
        shape, stored = states.get_shape(), STORED_DTYPES.get(states.get_dtype(), states.get_dtype())
    if stored != manifest.dtype:
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) holds {stored} hidden states but manifest.json "
            f"says {manifest.dtype}: re-materialize hidden_states"
        )
    expected = [row["seq_len"], len(manifest.layer_ids), manifest.hidden_size]
    if list(shape) != expected:
        raise TrainingDataError(
            f"{path} (row {row['partition']}/{row['prompt_id']}) holds hidden_states {list(shape)}, "
            f"expected {expected} from manifest.json: re-materialize hidden_states"
        )


def build_training_data(storage_root: Path, partitions: list[str], work_root: Path, log=None) -> TrainingData:
    """Build (or reuse) the training folder for ``partitions`` under ``work_root``."""
    storage_root, work_root = Path(storage_root), Path(work_root)
    if not partitions:
        raise TrainingDataError("no partitions selected: name at least one dataset partition")
    tables, manifests = [], {}
    for partition in partitions:
        table, manifests[partition] = _read_partition(storage_root, partition)
        tables.append(table)
    identities = {p: m.identity() for p, m in manifests.items()}
    if len(set(identities.values())) > 1:
        raise TrainingDataError(
            f"hidden_states partitions were captured differently (verifier id, layer ids, hidden size, "
            f"dtype): {identities}; re-materialize them with one verifier configuration"
        )
    manifest = manifests[partitions[0]]
    rows = pa.concat_tables(tables)
    missing = pc.is_null(rows["content_id"])
    skipped_missing = int(pc.sum(missing).as_py() or 0)
    rows = rows.filter(pc.invert(missing))
    if skipped_missing and log:
        log.warning(
            f"{skipped_missing} train/validation rows of {partitions} have no hidden states yet and are left out: "
            "materialize hidden_states for them to train on everything"
        )
    _check_rows(rows)
    supervised = pa.array(_per_row_sum(rows["loss_mask"]), pa.int64())
    rows = rows.append_column("supervised_tokens", supervised)
    unsupervised = pc.equal(supervised, 0)
    skipped_unsupervised = int(pc.sum(unsupervised).as_py() or 0)
    rows = rows.filter(pc.invert(unsupervised))
    splits = rows["split"].to_pylist()
    for split, role in ((TRAIN, "train on"), (VALIDATION, "pick the best epoch and stop early with")):
        if split not in splits:
            raise TrainingDataError(
                f"partitions {partitions} have no {split}-split rows with hidden states and supervised tokens "
                f"to {role}: materialize token_sequences and hidden_states for them (with the {split} split), "
                f"and give the prompts a validation_fraction above 0"
            )
    prompt_ids = rows["prompt_id"].to_pylist()
    # Train rows first, then validation rows (speculators validates on the tail); hash order inside each.
    order = sorted(
        range(len(rows)), key=lambda i: (splits[i] == VALIDATION, hashlib.sha256(prompt_ids[i].encode()).digest())
    )
    rows = rows.take(pa.array(order))
    content_hash = combined_hash(
        [repr(manifest.identity())]
        + [
            f"{s}:{c}:{hashlib.sha256(np.asarray(m, np.int8).tobytes()).hexdigest()}"
            for s, c, m in zip(
                rows["split"].to_pylist(), rows["content_id"].to_pylist(), rows["loss_mask"].to_pylist(), strict=True
            )
        ]
    )
    final = work_root / f"data-{content_hash[:16]}"
    freqs, num_supervised = _supervised_counts(rows)
    result = TrainingData(
        path=final,
        manifest=manifest,
        partitions=list(partitions),
        num_rows=len(rows),
        num_validation_rows=splits.count(VALIDATION),
        num_tokens=int(pc.sum(rows["seq_len"]).as_py()),
        num_supervised_tokens=num_supervised,
        skipped_without_hidden_states=skipped_missing,
        skipped_unsupervised=skipped_unsupervised,
        content_hash=content_hash,
    )
    if (final / COMPLETE_MARKER).exists():
        if log:
            log.info(f"training data {final} already built ({len(rows)} rows): reusing it")
        return result
    _write_folder(rows, freqs, manifest, final, log)
    return result


def _write_folder(rows: pa.Table, freqs: dict[int, int], manifest: FeatureManifest, final: Path, log) -> None:
    import datasets
    import torch

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        arrow = pa.table(
            {
                "input_ids": rows["input_ids"].cast(pa.list_(pa.int64())),
                "loss_mask": rows["loss_mask"].cast(pa.list_(pa.int64())),
                "seq_len": rows["seq_len"].cast(pa.int64()),
            }
        )
        dataset = datasets.Dataset(arrow)
        dataset.set_format(type="torch")
        dataset.save_to_disk(str(tmp))
        links = tmp / "hidden_states"
        links.mkdir()
        for i, row in enumerate(rows.select(["partition", "prompt_id", "seq_len", "file", "tensor_root"]).to_pylist()):
            target = Path(row["tensor_root"]) / row["file"]
            _check_tensor_file(target, row, manifest)
            # Relative, so moving the whole storage root keeps the links valid.
            os.symlink(os.path.relpath(target, final / "hidden_states"), links / f"hs_{i}.safetensors")
        torch.save(freqs, tmp / "token_freq.pt")
        write_parquet(rows.drop(["input_ids", "loss_mask", "tensor_root"]), tmp / "rows.parquet")
        (tmp / COMPLETE_MARKER).write_text(json.dumps({"rows": len(rows)}))
        if final.exists():  # an incomplete earlier attempt
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if log:
        log.info(f"built training data {final}: {len(rows)} rows, {len(freqs)} distinct supervised tokens")
