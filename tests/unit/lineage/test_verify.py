"""`lineage verify` on hand-made checkpoints (recorded by the project's own file_entry, links_entry,
keep_checkpoint and write_lineage): the parallel hashing against one file after another, the quick tier,
the signature, and what the command prints."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, LINEAGE_DIGEST_FILE, LINEAGE_FILE, LINEAGE_SIGNATURE_FILE
from eagle_assets.eagle3_checkpoint.saved import keep_checkpoint
from eagle_assets.lineage.record import (
    DATA_VERSION_TAG,
    KEY_ENV,
    KEY_FILE_ENV,
    LINEAGE_DIGEST_KEY,
    REQUIRED_KEYS,
    LineageError,
    file_entry,
    lineage_key,
    links_entry,
    write_lineage,
)
from eagle_assets.lineage.record_checks import Discrepancy
from eagle_assets.lineage.verify import verify_lineage
from tests.helpers.lineage import weight_reads

runner = CliRunner()
KEY = b"a lineage key for the tests"
# `lineage verify`'s environment, as its context's obj (never os.environ: docs/tests.md): no instance, no key.
NO_ENV: dict[str, str] = {}


def make_checkpoint(
    root: Path,
    *,
    files: int = 12,
    key: bytes | None = None,
    unsized: tuple[int, ...] = (),
    hidden_states: dict | None = None,
    changed_while_training: list | None = None,
) -> Path:
    """Hidden-state-like files of decreasing size (so the pool finishes them out of order), a folder of
    links, and a kept checkpoint whose lineage records them all; ``unsized``: files recorded without a size;
    ``hidden_states``: the record's hidden_states section."""
    tensors = root / "hidden_states" / "demo" / "tensors"
    tensors.mkdir(parents=True)
    artifacts = []
    for i in range(files):
        path = tensors / f"{i:04d}.safetensors"
        path.write_bytes(bytes([i]) * (4096 * (files - i)) + i.to_bytes(4, "little"))
        entry = file_entry(root, path, "hidden_states", "demo")
        artifacts.append({**entry, "bytes": None} if i in unsized else entry)
    links = root / "eagle3_checkpoint" / "_work" / "data-0" / "hidden_states"
    links.mkdir(parents=True)
    (links / "0.safetensors").symlink_to(tensors / "0000.safetensors")
    artifacts.append(links_entry(root, links, "training_data"))
    best = root / "best"
    best.mkdir()
    (best / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3"}))
    (best / "model.safetensors").write_bytes(b"weights" * 1000)
    lineage = {name: {} for name in REQUIRED_KEYS} | {"storage_root": str(root), "artifacts": artifacts}
    lineage["training"] = {"seed": 0, "training_run": "demo"}
    lineage["hidden_states"] = hidden_states or {}
    lineage["changed_while_training"] = changed_while_training or []
    folder, _, _ = keep_checkpoint(
        best,
        root / EAGLE3_CHECKPOINT,
        "demo",
        {"training.json": lineage["training"]},
        finish=lambda tmp, hashes: write_lineage(tmp, lineage, hashes, key),
    )
    return folder


def tensor(root: Path, i: int) -> Path:
    return root / "hidden_states" / "demo" / "tensors" / f"{i:04d}.safetensors"


def flip_last_byte(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def forge(folder: Path, path: Path) -> None:
    """What a forger does: change a file, record its new hash in lineage.json and rewrite lineage.sha256."""
    flip_last_byte(path)
    record = json.loads((folder / LINEAGE_FILE).read_text())
    for artifact in record["artifacts"]:
        if artifact["path"].endswith(path.name):
            artifact["sha256"] = file_sha256(path)
    (folder / LINEAGE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    (folder / LINEAGE_DIGEST_FILE).write_text(f"{file_sha256(folder / LINEAGE_FILE)}  {LINEAGE_FILE}\n")


def test_parallel_hashing_finds_what_one_file_after_another_finds(tmp_path):
    root = tmp_path / "data"
    folder = make_checkpoint(root, files=40)
    flip_last_byte(tensor(root, 3))
    tensor(root, 7).unlink()
    expected = [
        Discrepancy("changed", "hidden_states/demo/tensors/0003.safetensors", tensor(root, 3), "hidden_states"),
        Discrepancy("vanished", "hidden_states/demo/tensors/0007.safetensors", tensor(root, 7), "hidden_states"),
    ]
    one = verify_lineage(folder, workers=1)
    many = verify_lineage(folder, workers=16)
    assert one.problems == many.problems == expected
    assert one.checked == many.checked == 40 + 1 + 3  # tensors, the links, the checkpoint's own files
    assert one.tier == many.tier == "full" and one.seed is None
    assert one.hashed_files == many.hashed_files == 39 + 2 + 1  # vanished: none; model files: once; training.json
    assert one.hashed_bytes == many.hashed_bytes


def test_the_weights_are_read_once(tmp_path, monkeypatch):
    folder = make_checkpoint(tmp_path / "data")
    reads = weight_reads(monkeypatch)
    assert verify_lineage(folder, workers=4).problems == []
    assert reads == [folder / "model.safetensors"]


def test_progress_reports_every_file_and_byte(tmp_path):
    folder = make_checkpoint(tmp_path / "data")
    seen = []
    result = verify_lineage(folder, workers=3, progress=seen.append)
    last = seen[-1]
    # One job per entry, the checkpoint's config and weights among them (hashed once for every check).
    assert last.files_done == last.files_total == result.checked
    assert last.bytes_done == last.bytes_total == result.hashed_bytes > 0
    assert all(a.files_done <= b.files_done for a, b in itertools.pairwise(seen))


def test_quick_catches_a_size_change_and_a_sampled_content_change_and_names_its_seed(tmp_path):
    root = tmp_path / "data"
    folder = make_checkpoint(root)
    with tensor(root, 2).open("ab") as fh:
        fh.write(b"x")
    result = verify_lineage(folder, quick=True, sample=0)
    assert result.tier == "quick" and isinstance(result.seed, int) and result.sampled == 0
    [problem] = result.problems
    assert (problem.kind, problem.where) == ("changed", tensor(root, 2)) and "recorded" in problem.detail
    assert result.hashed_files == 2  # only the checkpoint's config and weights
    # Same size, other bytes: only a sample holding the file finds it.
    with tensor(root, 2).open("r+b") as fh:
        fh.truncate(tensor(root, 2).stat().st_size - 1)
    flip_last_byte(tensor(root, 5))
    assert verify_lineage(folder, quick=True, sample=0).problems == []
    everything = verify_lineage(folder, quick=True, sample=100, seed=7)
    assert [(p.kind, p.where) for p in everything.problems] == [("changed", tensor(root, 5))]
    assert everything.seed == 7 and everything.sampled == 13  # 12 tensors and training.json
    # A seed names one sample: a run repeats with it.
    runs = [verify_lineage(folder, quick=True, sample=4, seed=seed) for seed in (1, 1, 2)]
    assert runs[0].problems == runs[1].problems and runs[0].hashed_bytes == runs[1].hashed_bytes


def test_quick_hashes_a_file_recorded_without_a_size(tmp_path):
    root = tmp_path / "data"
    folder = make_checkpoint(root, unsized=(4,))
    flip_last_byte(tensor(root, 4))
    [problem] = verify_lineage(folder, quick=True, sample=0).problems
    assert (problem.kind, problem.where) == ("changed", tensor(root, 4))


def test_a_forged_record_passes_without_the_key_and_fails_with_it(tmp_path):
    root = tmp_path / "data"
    folder = make_checkpoint(root, key=KEY)
    assert (folder / LINEAGE_SIGNATURE_FILE).read_text().startswith("hmac-sha256 ")
    assert verify_lineage(folder, key=KEY).signature == "ok"
    forge(folder, tensor(root, 1))
    alone = verify_lineage(folder)
    assert alone.problems == [] and alone.signature == "unchecked"  # self-consistent: all it can tell
    keyed = verify_lineage(folder, key=KEY)
    assert keyed.signature == "mismatch"
    assert [(p.kind, p.path) for p in keyed.problems] == [("signature", LINEAGE_SIGNATURE_FILE)]
    assert "does not match lineage.json" in keyed.problems[0].detail
    result = runner.invoke(app, ["lineage", "verify", str(folder)], obj={**NO_ENV, KEY_ENV: KEY.decode()})
    assert result.exit_code == 1 and f"signature: lineage {LINEAGE_SIGNATURE_FILE}" in result.output, result.output


def test_a_missing_signature_fails_when_a_key_is_given(tmp_path):
    folder = make_checkpoint(tmp_path / "data")
    key_file = tmp_path / "key"
    key_file.write_text(KEY.decode() + "\n")
    result = runner.invoke(app, ["lineage", "verify", str(folder), "--key-file", str(key_file)], obj=NO_ENV)
    assert result.exit_code == 1, result.output
    assert f"signature: lineage {LINEAGE_SIGNATURE_FILE}" in result.output and "--sign" in result.output
    # --sign signs only a record the Dagster instance confirms.
    result = runner.invoke(app, ["lineage", "verify", str(folder), "--key-file", str(key_file), "--sign"], obj=NO_ENV)
    assert result.exit_code == 1 and "not signed: the Dagster instance did not confirm" in result.output
    assert not (folder / LINEAGE_SIGNATURE_FILE).exists()


def test_sign_writes_the_signature_of_a_record_the_instance_confirms(tmp_path):
    folder = make_checkpoint(tmp_path / "data")
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        metadata = {"path": str(folder), LINEAGE_DIGEST_KEY: file_sha256(folder / LINEAGE_FILE)}
        instance.report_runless_asset_event(dg.AssetMaterialization(EAGLE3_CHECKPOINT, metadata=metadata))
        env = {**NO_ENV, "DAGSTER_HOME": str(home), KEY_ENV: KEY.decode()}
        result = runner.invoke(app, ["lineage", "verify", str(folder), "--sign"], obj=env)
        assert result.exit_code == 0, result.output
        assert "matches lineage.sha256 and the Dagster instance and lineage.sig (signed now)" in result.output
        assert verify_lineage(folder, instance=instance, key=KEY).problems == []


def test_the_command_names_the_tier_and_what_it_cannot_tell_without_a_key(tmp_path):
    folder = make_checkpoint(tmp_path / "data")
    full = runner.invoke(app, ["lineage", "verify", str(folder), "--workers", "2"], obj=NO_ENV)
    assert full.exit_code == 0, full.output
    assert full.output.startswith("ok: lineage.json matches lineage.sha256; 16 artifacts match their recorded sha256")
    assert "full tier" in full.output and "MB/s" in full.output
    assert "checks only that the record is self-consistent" in full.output
    quick = runner.invoke(
        app, ["lineage", "verify", str(folder), "--quick", "--sample", "3", "--seed", "11"], obj=NO_ENV
    )
    assert quick.exit_code == 0, quick.output
    assert "3 sampled ones their sha256 (quick tier)" in quick.output and "--quick --sample 3 --seed 11" in quick.output
    keyed = runner.invoke(app, ["lineage", "verify", str(folder)], obj={**NO_ENV, KEY_ENV: KEY.decode()})
    assert keyed.exit_code == 1 and "self-consistent" not in keyed.output  # the key: no caveat, and no signature


def test_the_lineage_key_comes_from_a_file_or_the_environment(tmp_path):
    environ = {name: value for name, value in os.environ.items() if name not in (KEY_ENV, KEY_FILE_ENV)}
    assert lineage_key(environ=environ) is None
    environ[KEY_ENV] = "from-env"
    assert lineage_key(environ=environ) == b"from-env"
    key_file = tmp_path / "key"
    key_file.write_text("  from-file\n")
    environ[KEY_FILE_ENV] = str(key_file)
    assert lineage_key(environ=environ) == b"from-file"
    assert lineage_key(key_file, environ) == b"from-file"
    key_file.write_text("\n")
    with pytest.raises(LineageError, match="empty"):
        lineage_key(environ=environ)
    with pytest.raises(LineageError, match="cannot be read"):
        lineage_key(tmp_path / "absent", environ)
    assert lineage_key.__defaults__[-1] is os.environ  # the process's, read when called


def test_features_computed_online_are_named_as_never_stored(tmp_path):
    """An online-features checkpoint: what exists is checked, and the note says which features never existed
    on disk (a stored checkpoint gets no such note)."""
    online = {
        "features": "online",
        "generated_rows": 23,
        "vllm_version": "0.32.0",
        "connector": "eagle_assets.hidden_states.vllm_connector.CPUSafeHiddenStatesConnector",
        "layer_ids": [1, 2, 3, 4],
        "dtype": "bfloat16",
        "token_sequences_version": "0123456789abcdef",
        "stored": None,
    }
    folder = make_checkpoint(tmp_path / "data", hidden_states={"demo": online})
    result = verify_lineage(folder)
    assert result.problems == []
    [note] = result.notes
    assert note.startswith("hidden_states[demo]: features computed online while training and never stored (23 rows")
    assert "token_sequences 0123456789abcdef, are checked" in note and "none was stored" in note
    assert verify_lineage(make_checkpoint(tmp_path / "stored")).notes == []


def test_an_upstream_rematerialized_while_training_is_a_note_and_a_vanished_trained_on_version_fails(tmp_path):
    """An upstream re-materialized while the checkpoint trained: the record lists the version trained on, so
    verify passes and notes the newer one; a trained-on version gone before the record was made fails,
    naming the partition and both versions."""
    changed = {"asset": "token_sequences", "partition": "demo", "trained_on": "aaaa", "current": "bbbb"}
    result = verify_lineage(
        make_checkpoint(tmp_path / "kept", changed_while_training=[{**changed, "trained_on_stored": True}])
    )
    assert result.problems == []
    [note] = result.notes
    assert note.startswith("token_sequences[demo] was re-materialized while the checkpoint trained")
    assert "this record lists version aaaa, the one it trained on (bbbb is current)" in note
    result = verify_lineage(
        make_checkpoint(tmp_path / "gone", changed_while_training=[{**changed, "trained_on_stored": False}])
    )
    [problem] = result.problems
    assert problem.kind == "vanished" and problem.asset == "token_sequences"
    assert "token_sequences[demo] was re-materialized while the checkpoint trained" in str(problem)
    assert "version aaaa, the one it trained on, is no longer stored" in str(problem)
    assert "(version bbbb is current)" in str(problem)
    assert result.notes == []


def test_two_runs_that_train_identical_weights_keep_their_own_records_and_both_verify(tmp_path):
    """Kept folders are never rewritten: the same run keeping its weights again finds them kept; another run
    with identical weights keeps its own folder, and each verifies against its own materialization."""
    root = tmp_path / "data"
    first = make_checkpoint(root)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    record = json.loads((first / LINEAGE_FILE).read_text())
    del record["checkpoint_files"], record["checkpoint_hash"]

    def keep(run: str):
        training = {"seed": 0, "training_run": run}
        lineage = record | {"training": training}
        finish = lambda tmp, hashes: write_lineage(tmp, lineage, hashes)  # noqa: E731
        return keep_checkpoint(root / "best", root / EAGLE3_CHECKPOINT, run, {"training.json": training}, finish)

    again, digest, written = keep("demo")
    assert (again, digest[:16], written) == (first, first.name, None)
    second, other_digest, _ = keep("other")
    assert second.parent == first.parent and second.name == other_digest[:16] != first.name
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert (second / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert json.loads((second / "training.json").read_text())["training_run"] == "other"
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        for folder in (first, second):  # the second run's materialization is the newest
            metadata = {"path": str(folder), LINEAGE_DIGEST_KEY: file_sha256(folder / LINEAGE_FILE)}
            event = dg.AssetMaterialization(EAGLE3_CHECKPOINT, metadata=metadata, tags={DATA_VERSION_TAG: folder.name})
            instance.report_runless_asset_event(event)
        for folder in (first, second):
            verified = verify_lineage(folder, instance=instance)
            assert verified.problems == [] and verified.against_instance, folder


def test_the_instance_record_is_found_behind_pages_of_newer_checkpoint_materializations(tmp_path):
    from eagle_assets.lineage.materializations import newest_first
    from eagle_assets.lineage.record_checks import recorded_digest

    folder = make_checkpoint(tmp_path / "data")
    with dg.instance_for_test() as instance:
        digest = file_sha256(folder / LINEAGE_FILE)
        metadata = {"path": str(folder), LINEAGE_DIGEST_KEY: digest}
        instance.report_runless_asset_event(dg.AssetMaterialization(EAGLE3_CHECKPOINT, metadata=metadata))
        for other in range(230):  # other checkpoints trained since: more than two pages
            elsewhere = {"path": str(tmp_path / f"other-{other}"), LINEAGE_DIGEST_KEY: "0" * 64}
            instance.report_runless_asset_event(dg.AssetMaterialization(EAGLE3_CHECKPOINT, metadata=elsewhere))
        paths = [
            record.event_log_entry.asset_materialization.metadata["path"].value
            for record in newest_first(instance, EAGLE3_CHECKPOINT)
        ]
        assert len(paths) == 231 and paths[0].endswith("other-229") and paths[-1] == str(folder)
        assert recorded_digest(instance, folder, "")[0] == digest
        assert verify_lineage(folder, instance=instance).problems == []
