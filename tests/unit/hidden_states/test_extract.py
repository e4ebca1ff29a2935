"""The hidden_states stage without Dagster: row selection (only rows made for the verifier), the disk budget,
and the extraction's files, index and manifest, with a fake backend (no model: states derived from the token
ids)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.backends import SampleTensors, VerifierBackend
from eagle_assets.capacity.plan import FILE_OVERHEAD_BYTES
from eagle_assets.core.files import combined_hash, file_sha256, publish_version, write_json, write_parquet
from eagle_assets.core.layout import (
    CURRENT_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    SEQUENCES_FILE,
    TOKEN_SEQUENCES,
    TOKENIZATION_FILE,
    VERSIONS_DIR,
    asset_folder,
    current_folder,
    sequences_file,
)
from eagle_assets.hidden_states.extract import (
    ExtractionProgress,
    ExtractionSettings,
    HiddenStatesInputError,
    NotEnoughDisk,
    ProgressLog,
    SequencesNotForVerifier,
    check_disk_budget,
    extract_hidden_states,
    select_rows,
)
from eagle_assets.hidden_states.files import INDEX_SCHEMA, SCALES_KEY, content_id, load_sample, relative_path
from eagle_assets.hidden_states.index import FORMATS, features_version
from eagle_assets.reasoning_samples.recipe import tokenizer_hash
from eagle_assets.token_sequences.drift import DriftReport
from tests.helpers.synthetic import publish_table
from tests.helpers.upstream import model_folder

HIDDEN, LAYERS = 8, 4
ROWS = [
    ("p0", [5, 6, 7]),
    ("p1", [8, 9]),
    ("p2", [5, 6, 7]),  # the same tokens as p0: one file for both
    ("p3", [10, 11, 12, 13]),
]


@dataclass
class FakeBackend(VerifierBackend):
    """A 4-layer verifier whose state at (token, layer, i) is token + layer/10 + i/100."""

    name: str = "fake"
    description: str = "states derived from the token ids"
    data_parallel: bool = True
    extracted: list = field(default_factory=list)  # the keys of every extract call

    def num_layers(self, model_path) -> int:
        return LAYERS

    def hidden_size(self, model_path) -> int:
        return HIDDEN

    def vocab_size(self, model_path) -> int:
        return 32

    def identity(self, model_path) -> str:
        return "fake-verifier"

    def describe(self, model_path) -> dict:
        return {"backend": self.name, "model_path": str(model_path), "identity": self.identity(model_path)}

    def extract(self, model_path, request, sink, progress=None):
        samples = tokens = 0
        for key, ids in request.sequences:
            self.extracted.append(key)
            states = (
                torch.tensor(ids, dtype=torch.float32)[:, None, None]
                + torch.tensor(request.layer_ids)[None, :, None] / 10
                + torch.arange(HIDDEN)[None, None, :] / 100
            )
            sink(SampleTensors(key, states.to(torch.bfloat16), torch.tensor(ids, dtype=torch.int64)))
            samples, tokens = samples + 1, tokens + len(ids)
            if progress is not None:
                progress(samples, tokens)
        return {"engine_start_s": 0.5}


class Log:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(line)


def sequences(rows=ROWS) -> pa.Table:
    return pa.table(
        {
            "prompt_id": [p for p, _ in rows],
            "turn": [0] * len(rows),
            "input_ids": [ids for _, ids in rows],
            "seq_len": [len(ids) for _, ids in rows],
        }
    )


def settings(**kw) -> ExtractionSettings:
    return ExtractionSettings(**{"model_path": Path("/nowhere"), "devices": ["cpu"], "disk_headroom_gb": 0.0, **kw})


def publish_sequences(root: Path, made_for: Path, prompt_mismatches: int = 0) -> Path:
    """``sequences()`` as the current token_sequences[demo] version, with the record token_sequences writes
    beside the rows: the tokenizer of the model folder ``made_for``, the drift of 5 re-rendered samples."""
    record = {
        "verifier": str(made_for),
        "tokenizer_hash": tokenizer_hash(made_for),
        "drift": DriftReport(checked=5, prompt_mismatches=prompt_mismatches).metadata(),
    }

    def write(tmp: Path) -> None:
        write_parquet(sequences(), tmp / SEQUENCES_FILE)
        write_json(record, tmp / TOKENIZATION_FILE)

    version = combined_hash([json.dumps(record, sort_keys=True)])[:16]
    return publish_version(asset_folder(root, TOKEN_SEQUENCES, "demo"), version, write) / SEQUENCES_FILE


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_select_rows_reads_every_row_or_those_of_the_chosen_splits(tmp_path):
    verifier = model_folder(tmp_path / "verifier")
    with pytest.raises(HiddenStatesInputError, match=r"materialize token_sequences\[demo\] first"):
        select_rows(sequences_file(tmp_path, "demo"), tmp_path, "demo", model_path=verifier)
    source = publish_sequences(tmp_path, verifier)
    every = select_rows(source, tmp_path, "demo", model_path=verifier)
    assert every["prompt_id"].to_pylist() == ["p0", "p1", "p2", "p3"]
    with pytest.raises(HiddenStatesInputError, match="materialize prompts for partition 'demo' first"):
        select_rows(source, tmp_path, "demo", ["train"], model_path=verifier)
    prompts = pa.table(
        {"prompt_id": ["p0", "p1", "p2"], "split": ["train", "heldout", "validation"], "group_id": ["a", "b", "c"]}
    )
    publish_table(tmp_path, "prompts", "demo", "prompts.parquet", prompts)
    # p3 is in no current split: never selected by split.
    chosen = select_rows(source, tmp_path, "demo", ["train", "validation"], model_path=verifier)
    assert chosen["prompt_id"].to_pylist() == ["p0", "p2"]
    assert chosen.column_names == ["prompt_id", "turn", "input_ids", "seq_len"]


def test_rows_made_for_the_verifiers_tokenizer_are_selected_wherever_its_folder_is(tmp_path):
    source = publish_sequences(tmp_path, model_folder(tmp_path / "served"))
    copy = model_folder(tmp_path / "copy")  # another folder with the same tokenizer files
    assert select_rows(source, tmp_path, "demo", model_path=copy).num_rows == len(ROWS)


def test_rows_of_another_tokenizer_are_refused_naming_both_and_nothing_is_written(tmp_path):
    qwen3, kimi = model_folder(tmp_path / "qwen3", "qwen3"), model_folder(tmp_path / "kimi", "kimi")
    source = publish_sequences(tmp_path, qwen3)
    before = files_under(tmp_path)
    with pytest.raises(SequencesNotForVerifier) as refused:
        select_rows(source, tmp_path, "demo", model_path=kimi)
    message = str(refused.value)
    assert f"token_sequences[demo] ({source.parent}) was tokenized for {qwen3} with tokenizer" in message
    assert tokenizer_hash(qwen3) in message and f"loads {kimi} with tokenizer {tokenizer_hash(kimi)}" in message
    fix = f"Re-materialize token_sequences[demo] with this verifier, or point verifier.model_path at {qwen3}."
    assert message.endswith(fix)
    assert isinstance(refused.value, HiddenStatesInputError)  # what the asset turns into the step's failure
    assert files_under(tmp_path) == before and not (tmp_path / "hidden_states").exists()


def test_rows_whose_prompts_drifted_above_the_limit_are_refused_with_the_numbers(tmp_path):
    verifier = model_folder(tmp_path / "verifier")
    source = publish_sequences(tmp_path, verifier, prompt_mismatches=2)
    with pytest.raises(SequencesNotForVerifier) as refused:
        select_rows(source, tmp_path, "demo", model_path=verifier)
    message = str(refused.value)
    assert "the prompts of 40.0% of 5 re-rendered samples differ from the server's tokens (limit 0%)" in message
    assert "point verifier.model_path (and verifier.backend) at the folder the server served them from" in message
    assert message.endswith("then token_sequences[demo].")


def test_rows_without_their_record_are_refused(tmp_path):
    verifier = model_folder(tmp_path / "verifier")
    source = publish_table(tmp_path, TOKEN_SEQUENCES, "demo", SEQUENCES_FILE, sequences())
    with pytest.raises(SequencesNotForVerifier, match=r"records no tokenizer_hash or drift.*token_sequences\[demo\]"):
        select_rows(source, tmp_path, "demo", model_path=verifier)


def test_disk_budget_is_the_plans_arithmetic_and_fails_with_the_numbers(tmp_path):
    assert check_disk_budget(tmp_path, 1000, 3, 72, 0.0) == 1000 * 72 + 3 * FILE_OVERHEAD_BYTES
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(NotEnoughDisk) as refused:
        check_disk_budget(tmp_path, 1000, 3, 72, free / 1e9 + 1)
    text = str(refused.value)
    assert "3 files, 1000 tokens x 72 bytes/token" in text and "GB headroom" in text and "GB free" in text
    assert refused.value.metadata["needed_bytes"] == 1000 * 72 + 3 * FILE_OVERHEAD_BYTES
    assert refused.value.metadata["tokens"] == 1000 and refused.value.metadata["free_bytes"] > 0


def test_extraction_writes_one_file_per_distinct_row_its_index_and_manifest(tmp_path):
    backend, log, seen = FakeBackend(), Log(), []
    folder = tmp_path / "hidden_states" / "demo"
    done = extract_hidden_states(sequences(), folder, backend, settings(), log, seen.append, label="demo")

    layer_ids = [1, 2, 3, 4]  # spread over a 4-layer model, then the final layer
    assert done.layer_ids == layer_ids and done.hidden_size == HIDDEN and done.identity == "fake-verifier"
    assert (done.rows, done.files, done.files_written, done.files_reused) == (4, 3, 3, 0)
    assert done.tokens == 12 and done.new_tokens == 9  # p2 repeats p0
    assert done.bytes_per_token == LAYERS * HIDDEN * 2 + 8 and done.engine_facts == {"engine_start_s": 0.5}
    assert done.workers == 1 and done.bytes_written == sum(p.stat().st_size for p in (folder / "tensors").iterdir())
    assert len(backend.extracted) == 3
    # Progress carries the totals of what there was to extract.
    assert seen[-1] == ExtractionProgress(3, 9, 3, 9, seen[-1].elapsed_s) and len(seen) == 3

    # The index and manifest are a version folder of their own, named by their content, and current.
    assert done.folder == folder / VERSIONS_DIR / done.data_version == current_folder(folder)
    index = pq.read_table(done.folder / INDEX_FILE)
    assert index.schema == INDEX_SCHEMA
    rows = index.to_pylist()
    assert [r["prompt_id"] for r in rows] == ["p0", "p1", "p2", "p3"]
    assert rows[0]["file"] == rows[2]["file"] and len({r["file"] for r in rows}) == 3
    for row, (_, ids) in zip(rows, ROWS):
        assert row["content_id"] == content_id(ids, "fake-verifier", layer_ids)
        assert row["file"] == relative_path(row["content_id"]) and row["seq_len"] == len(ids)
        assert file_sha256(folder / row["file"]) == row["sha256"]
        stored = load_sample(folder / row["file"])
        assert stored["token_ids"].tolist() == ids and SCALES_KEY not in stored
        assert stored["hidden_states"].shape == (len(ids), LAYERS, HIDDEN)
        assert float(stored["hidden_states"][0, 1, 0]) == pytest.approx(ids[0] + 0.2, abs=0.05)
    manifest = json.loads((done.folder / MANIFEST_FILE).read_text())
    assert done.data_version == features_version(index, manifest)
    assert manifest == {
        "verifier": backend.describe(Path("/nowhere")),
        "layer_ids": layer_ids,
        "aux_layer_ids": [1, 2, 3],
        "final_layer_id": 4,
        "hidden_size": HIDDEN,
        "dtype": "bfloat16",
        "format": FORMATS["bfloat16"],
        "files": 3,
        "tokens": 12,
    }
    assert log.lines[0].startswith("demo: 4 rows, 3 distinct, 3 to extract (9 tokens")
    assert log.lines[-1].startswith("demo: wrote 3 files (9 tokens)") and log.lines[-1].endswith("reused 0")


def test_a_second_extraction_reuses_every_file_and_indexes_what_a_killed_one_left(tmp_path):
    folder = tmp_path / "hidden_states" / "demo"
    first = extract_hidden_states(sequences(ROWS[:2]), folder, FakeBackend(), settings(), Log())
    index_before = pq.read_table(first.folder / INDEX_FILE).to_pylist()
    # A killed extraction: its files are in place, its index never published; and a half-written temporary.
    shutil.rmtree(folder / VERSIONS_DIR)
    (folder / CURRENT_FILE).unlink()
    (folder / "tensors" / ".half.safetensors.tmp").write_bytes(b"partial")
    backend, log = FakeBackend(), Log()
    again = extract_hidden_states(sequences(), folder, backend, settings(), log)
    assert backend.extracted == [(3, content_id(ROWS[3][1], "fake-verifier", [1, 2, 3, 4]))]  # only p3 is new
    assert (again.files, again.files_written, again.files_reused, again.new_tokens) == (3, 1, 2, 4)
    assert "1 stale temporaries removed" in log.lines[0] and not list((folder / "tensors").glob(".*.tmp"))
    index = pq.read_table(again.folder / INDEX_FILE).to_pylist()
    assert index[:2] == index_before  # the hashes of the killed extraction's files, read back from disk
    assert again.data_version != first.data_version

    untouched = FakeBackend()
    third = extract_hidden_states(sequences(), folder, untouched, settings(), Log())
    assert untouched.extracted == [] and third.files_written == 0 and third.tokens_per_s == 0.0
    assert third.data_version == again.data_version and third.engine_facts == {}
    assert third.folder == again.folder == current_folder(folder)


def test_each_extraction_publishes_a_version_and_rewrites_no_earlier_one(tmp_path):
    """The same files under another row mapping, or another verifier description, is another version;
    an earlier version's index and manifest stay byte for byte as they were."""
    folder = tmp_path / "hidden_states" / "demo"
    whole = extract_hidden_states(sequences(), folder, FakeBackend(), settings(), Log())
    stored = {p.name: p.read_bytes() for p in whole.folder.iterdir()}
    # p2 shares p0's file: the same distinct files, indexed for other rows.
    fewer = extract_hidden_states(
        sequences([r for r in ROWS if r[0] != "p2"]), folder, FakeBackend(), settings(), Log()
    )
    assert fewer.files == whole.files and fewer.data_version != whole.data_version
    moved = extract_hidden_states(sequences(), folder, FakeBackend(), settings(model_path=Path("/moved")), Log())
    assert moved.files_written == 0 and moved.data_version not in (whole.data_version, fewer.data_version)
    assert current_folder(folder) == moved.folder
    assert sorted(p.name for p in (folder / VERSIONS_DIR).iterdir()) == sorted(
        v.data_version for v in (whole, fewer, moved)
    )
    assert {p.name: p.read_bytes() for p in whole.folder.iterdir()} == stored


def test_fp8_files_are_other_files_with_their_scales(tmp_path):
    pytest.importorskip("hs_connectors")
    folder = tmp_path / "hidden_states" / "demo"
    bf16 = extract_hidden_states(sequences(), folder, FakeBackend(), settings(), Log())
    fp8 = extract_hidden_states(sequences(), folder, FakeBackend(), settings(feature_dtype="fp8"), Log())
    assert fp8.files_written == 3 and fp8.bytes_per_token == LAYERS * HIDDEN + 4 + 8 < bf16.bytes_per_token
    manifest = json.loads((fp8.folder / MANIFEST_FILE).read_text())
    assert manifest["dtype"] == "fp8" and manifest["format"] == FORMATS["fp8"]
    assert fp8.folder != bf16.folder and (bf16.folder / INDEX_FILE).exists()
    for row in pq.read_table(fp8.folder / INDEX_FILE).to_pylist():
        assert SCALES_KEY in load_sample(folder / row["file"])


def test_not_enough_disk_stops_before_the_verifier_is_loaded(tmp_path):
    backend = FakeBackend()
    folder = tmp_path / "hidden_states" / "demo"
    with pytest.raises(NotEnoughDisk, match="3 files, 9 tokens"):
        extract_hidden_states(sequences(), folder, backend, settings(disk_headroom_gb=1e9), Log())
    assert backend.extracted == [] and not (folder / "tensors").exists() and not (folder / VERSIONS_DIR).exists()


def test_progress_log_logs_every_few_seconds_and_at_the_end():
    log = Log()
    progress = ProgressLog(log, every_s=3600)
    progress(ExtractionProgress(1, 10, 4, 40, 2.0))
    assert log.lines == []  # not yet due
    progress(ExtractionProgress(4, 40, 4, 40, 4.0))
    assert log.lines == ["hidden states: 4/4 files, 40/40 tokens, 10 tok/s"]
    every = ProgressLog(log, every_s=0)
    every(ExtractionProgress(1, 10, 4, 40, 1.0))
    assert log.lines[-1] == "hidden states: 1/4 files, 10/40 tokens, 10 tok/s"
