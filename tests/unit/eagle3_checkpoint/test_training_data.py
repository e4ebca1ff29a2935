"""The training folder speculators reads: links to the hidden_states tensors, the validation tail, token
counts, refusals of inconsistent features; and the random features it is tested on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.core.files import write_parquet
from eagle_assets.core.layout import index_file, sequences_file
from eagle_assets.eagle3_checkpoint.feature_manifest import TrainingDataError
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.lineage.artifacts import stored_versions
from tests.helpers.features import HIDDEN, PARTITIONS, copy_storage


def test_training_folder_links_tensors_and_speculators_reads_it(random_features, tmp_path):
    from speculators.train.data import ArrowDataset

    root, _ = random_features
    data = build_training_data(root, PARTITIONS, tmp_path / "work")
    assert data.num_rows == 24 and data.manifest.aux_layer_ids == [1, 2, 3]
    # The versions the rows were read from, for the lineage to name (not whatever is current by then).
    assert data.upstream_versions == stored_versions(root, PARTITIONS)
    assert all(data.upstream_versions[asset][p] for asset in ("token_sequences", "hidden_states") for p in PARTITIONS)
    links = sorted((data.path / "hidden_states").iterdir())
    assert len(links) == 24
    for link in links:
        # A link into the hidden_states asset's own tensor folder: nothing copied.
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.resolve().parent.parent.parent == (root / "hidden_states").resolve()
    dataset = ArrowDataset(max_len=256, datapath=str(data.path), on_missing="raise")
    for i in (0, len(dataset) - 1):
        sample = dataset[i]
        assert sample["hidden_states"].shape == (sample["input_ids"].shape[0], 3 * HIDDEN)
    # token_freq.pt counts exactly the loss-mask-1 tokens of the rows used.
    rows = {r["prompt_id"] for r in pq.read_table(data.path / "rows.parquet").to_pylist()}
    expected: dict[int, int] = {}
    for partition in PARTITIONS:
        for r in pq.read_table(sequences_file(root, partition)).to_pylist():
            if r["prompt_id"] in rows:
                for token, m in zip(r["input_ids"], r["loss_mask"], strict=True):
                    if m:
                        expected[token] = expected.get(token, 0) + 1
    assert torch.load(data.path / "token_freq.pt") == expected
    # Same inputs => the same folder, not rebuilt.
    stamp = (data.path / "rows.parquet").stat().st_mtime_ns
    again = build_training_data(root, PARTITIONS, tmp_path / "work")
    assert again.path == data.path and (data.path / "rows.parquet").stat().st_mtime_ns == stamp


def test_the_validation_split_is_the_tail_speculators_validates_on(random_features, tmp_path):
    from speculators.train.data import ArrowDataset

    from eagle_assets.prompts.splits import read_current_splits

    root, _ = random_features
    data = build_training_data(root, PARTITIONS, tmp_path / "work")
    rows = pq.read_table(data.path / "rows.parquet").to_pylist()
    n_val = data.num_validation_rows
    assert 0 < n_val < data.num_rows == len(rows)
    assert [r["split"] for r in rows] == ["train"] * (data.num_rows - n_val) + ["validation"] * n_val
    current = {pid: split for p in PARTITIONS for pid, (split, _) in read_current_splits(root, p).items()}
    assert all(current[r["prompt_id"]] == r["split"] for r in rows)  # the prompts table's labels, not others
    val = ArrowDataset(
        max_len=256, datapath=str(data.path), on_missing="raise", train_ratio=data.train_data_ratio, split="val"
    )
    assert len(val) == n_val


def test_synthetic_features_have_the_assets_schemas_and_load_without_dagster(random_features):
    import subprocess

    from eagle_assets.hidden_states.files import INDEX_SCHEMA
    from eagle_assets.token_sequences.build import SEQUENCES_SCHEMA

    root, _ = random_features
    assert pq.read_schema(sequences_file(root, "demo")) == SEQUENCES_SCHEMA
    assert pq.read_schema(index_file(root, "demo")) == INDEX_SCHEMA
    # Benchmarks write features with it outside any code location (from the repository root, as they run):
    # Dagster must stay out of its imports.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, tests.helpers.synthetic; print('dagster' in sys.modules)"],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"


def test_training_folder_rejects_inconsistent_features(random_features, tmp_path):
    root = copy_storage(random_features[0], tmp_path / "storage")
    with pytest.raises(TrainingDataError, match="materialize token_sequences for partition 'missing'"):
        build_training_data(root, ["missing"], tmp_path / "work")
    index_path = index_file(root, "demo")
    index = pq.read_table(index_path)
    wrong = index.set_column(
        index.schema.get_field_index("seq_len"), "seq_len", [[v + 1 for v in index["seq_len"].to_pylist()]]
    )
    write_parquet(wrong.cast(index.schema), index_path)
    with pytest.raises(TrainingDataError, match=r"disagree on seq_len .* demo/"):
        build_training_data(root, ["demo"], tmp_path / "work")
