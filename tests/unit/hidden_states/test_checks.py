"""The files_match_rows check without Dagster: what a sample of indexed files still holds, and its verdict."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from safetensors.torch import save_file

from eagle_assets.core.files import write_parquet
from eagle_assets.core.layout import MANIFEST_FILE, current_folder
from eagle_assets.hidden_states.checks import files_match_rows_result, sampled_file_problems
from eagle_assets.hidden_states.extract import extract_hidden_states
from eagle_assets.hidden_states.files import load_sample
from tests.helpers.synthetic import publish_table
from tests.unit.hidden_states.test_extract import ROWS, FakeBackend, Log, sequences, settings


def extracted(tmp_path):
    folder = tmp_path / "hidden_states" / "demo"
    source = publish_table(tmp_path, "token_sequences", "demo", "sequences.parquet", sequences())
    done = extract_hidden_states(sequences(), folder, FakeBackend(), settings(), Log())
    return folder, source, pq.read_table(done.folder / "index.parquet").to_pylist()


def test_intact_files_pass_and_the_sample_is_bounded(tmp_path):
    folder, source, index = extracted(tmp_path)
    assert sampled_file_problems(folder, source) == (len(index), [])
    assert sampled_file_problems(folder, source, sample=2)[0] == 2
    result = files_match_rows_result(len(index), [])
    assert result.passed and result.description is None
    assert result.metadata["checked"].value == 4 and result.metadata["examples"].value == "none"


def test_each_kind_of_damage_is_named(tmp_path):
    folder, source, index = extracted(tmp_path)
    edited = load_sample(folder / index[1]["file"])
    edited["hidden_states"][0, 0, 0] += 1  # a silent edit after indexing
    save_file(edited, str(folder / index[1]["file"]))
    (folder / index[3]["file"]).unlink()
    checked, problems = sampled_file_problems(folder, source)
    assert checked == 4 and sorted(problems) == sorted(
        [
            f"{index[1]['file']} (p1) changed since it was indexed",
            f"{index[3]['file']} (p3) is missing",
        ]
    )
    result = files_match_rows_result(checked, problems)
    assert not result.passed and result.metadata["problems"].value == 2
    assert result.description.startswith("2 of 4 sampled files do not match their index row, e.g. ")
    assert "delete the files `examples` names" in result.description


def test_other_tokens_and_another_dtype_than_the_manifest_are_problems(tmp_path):
    folder, source, index = extracted(tmp_path)
    # The row's tokens changed in token_sequences after extraction.
    write_parquet(sequences([("p0", [1, 2, 3]), *ROWS[1:]]), source)
    manifest_path = current_folder(folder) / MANIFEST_FILE
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "dtype": "fp8"}))
    _, problems = sampled_file_problems(folder, source)
    assert f"{index[0]['file']} holds other tokens than row p0 of token_sequences" in problems
    assert f"{index[1]['file']} is not stored as fp8, the dtype manifest.json records" in problems
    assert len(problems) == 4  # p0's other tokens; p1, p2 (p0's file) and p3 stored as bf16
