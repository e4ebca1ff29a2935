"""Lineage of a checkpoint trained by the real ``eagle3_checkpoint`` asset on a real chain (tests/helpers/
lineage.py: every asset the real one on the tiny verifier but the vLLM capture, stood in for by samples
written through the real store), materialized once on a temporary Dagster instance; then what
``eagle-assets lineage show/verify`` make of it, and of every kind of edit to its files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.files import checkpoint_hash, checkpoint_id, file_sha256
from eagle_assets.core.layout import (
    LINEAGE_DIGEST_FILE,
    LINEAGE_FILE,
    LINEAGE_SIGNATURE_FILE,
    PER_DATASET_STAGES,
    current_version,
    prompts_file,
    published_kind,
    read_training_record,
)
from eagle_assets.core.partitions import add_training_run
from eagle_assets.eagle3_checkpoint.asset import CODE_VERSION as CHECKPOINT_CODE_VERSION
from eagle_assets.lineage.collect import dagster_input_version
from eagle_assets.lineage.materializations import latest_materialization
from eagle_assets.lineage.record import KEY_ENV, LINEAGE_DIGEST_KEY, read_lineage
from eagle_assets.lineage.verify import verify_lineage
from eagle_assets.resources import StorageRoot, Verifier
from tests.helpers.fresh_interpreter import call_with_environment
from tests.helpers.lineage import chain_assets, weight_reads
from tests.helpers.upstream import PARTITION

runner = CliRunner()


RUN = "lineage"
KEY = "chain-test-lineage-key"


@pytest.fixture(scope="module")
def chain(tiny_verifier, tmp_path_factory):
    """(instance, storage root, checkpoint folder, DAGSTER_HOME), materialized once for the module: six demo
    prompts, a third of them validation, through hidden_states, then the checkpoint of training run ``RUN``."""
    base = tmp_path_factory.mktemp("lineage")
    storage = StorageRoot(root=str(base / "data"))
    resources = {"storage": storage, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu")}
    assets = chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))
    home = base / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        upstream = dg.materialize(
            assets,
            instance=instance,
            partition_key=PARTITION,
            resources=resources,
            selection=list(PER_DATASET_STAGES),
            run_config={"ops": {"prompts": {"config": {"limit": 6, "validation_fraction": 0.34}}}},
        )
        assert upstream.success
        add_training_run(instance, RUN)
        # Kept with a lineage key configured, as an operator who hands checkpoints to others would: set only in
        # the environment of an interpreter of its own (tests/helpers/fresh_interpreter.py says why).
        kept, args = base / "kept", (str(home), storage.root, str(tiny_verifier), RUN)
        call_with_environment("tests.helpers.lineage:train_checkpoint_at", *args, str(kept), environment={KEY_ENV: KEY})
        yield instance, Path(storage.root), Path(kept.read_text()), home


def test_lineage_records_dagster_provenance_and_every_file(chain):
    instance, root, ckpt, _ = chain
    lineage = read_lineage(ckpt)
    assert lineage["storage_root"] == str(root.resolve())
    for asset in PER_DATASET_STAGES:
        record = latest_materialization(instance, asset, PARTITION)
        assert lineage["dagster"][asset][PARTITION]["data_version"] == record["data_version"]
        assert lineage["run_ids"][f"{asset}[{PARTITION}]"] == record["run_id"]
    # Dagster's own input tags link the steps: token_sequences read these samples.
    links = {(link["asset"], link["input"]): link for link in lineage["links"]}
    assert set(links) == {
        ("reasoning_samples", "prompts"),
        ("token_sequences", "prompts"),
        ("token_sequences", "reasoning_samples"),
        ("hidden_states", "token_sequences"),
    }
    assert all(link["consistent"] for link in links.values())
    samples_version = lineage["dagster"]["reasoning_samples"][PARTITION]["data_version"]
    consumed = lineage["dagster"]["token_sequences"][PARTITION]["input_data_versions"]["reasoning_samples"]
    assert consumed == dagster_input_version({PARTITION: samples_version})
    # The files of each upstream partition's current version folder (named by its data version; the
    # samples': by their recipe), which no later materialization rewrites, and the indexed tensors.
    versions = lineage["versions"]
    assert versions == {asset: {PARTITION: current_version(root / asset / PARTITION)} for asset in PER_DATASET_STAGES}
    for asset in ("prompts", "token_sequences", "hidden_states"):
        assert versions[asset][PARTITION] == lineage["dagster"][asset][PARTITION]["data_version"]
    v = {asset: by_partition[PARTITION] for asset, by_partition in versions.items()}
    paths = {a["path"] for a in lineage["artifacts"]}
    assert {
        f"prompts/{PARTITION}/versions/{v['prompts']}/{name}" for name in ("prompts.parquet", "skipped.json")
    } <= paths
    assert {
        f"token_sequences/{PARTITION}/versions/{v['token_sequences']}/{name}"
        for name in ("sequences.parquet", "tokenization.json")
    } <= paths
    assert {
        f"hidden_states/{PARTITION}/versions/{v['hidden_states']}/{name}" for name in ("index.parquet", "manifest.json")
    } <= paths
    assert any(p.startswith(f"reasoning_samples/{PARTITION}/recipes/{v['reasoning_samples']}/shard-") for p in paths)
    assert any(p.startswith(f"hidden_states/{PARTITION}/tensors/") for p in paths)
    # Nothing outside them: no pointer (current.json) that a later materialization moves.
    stored = {asset: f"{asset}/{PARTITION}/{published_kind(asset)}/{v[asset]}/" for asset in PER_DATASET_STAGES}
    assert all(
        a["path"].startswith((stored[a["asset"]], f"hidden_states/{PARTITION}/tensors/"))
        for a in lineage["artifacts"]
        if a["asset"] in stored
    )
    # Every file of the kept folder but the record, its digest and its signature, the weights and training.json
    # among them.
    assert (
        {f["path"] for f in lineage["checkpoint_files"]}
        == {p.name for p in ckpt.iterdir()} - {LINEAGE_FILE, LINEAGE_DIGEST_FILE, LINEAGE_SIGNATURE_FILE}
        >= {"config.json", "model.safetensors", "training.json"}
    )
    assert lineage["checkpoint_hash"] == checkpoint_hash(ckpt)
    # The training folder: its files hashed, its hidden-state links as one entry.
    training_files = [a for a in lineage["artifacts"] if a["asset"] == "training_data"]
    assert {"rows.parquet", "token_freq.pt"} <= {Path(a["path"]).name for a in training_files}
    [links] = [a for a in training_files if "links" in a]
    assert links["links"] == pq.read_metadata(root / Path(links["path"]).parent / "rows.parquet").num_rows > 0
    src = lineage["prompt_sources"][PARTITION]
    assert src["plugin"] and src["counts"]["rows_kept"] == 6
    assert lineage["generation"][PARTITION]["reasoning_parser"] == "qwen3"
    assert lineage["generation"][PARTITION]["sampling"] == [{"temperature": 0.0}]
    assert lineage["tokenization"][PARTITION]["chat_template_hash"]
    assert lineage["training"]["versions"]["speculators"]
    assert lineage["training"]["code_version"] == CHECKPOINT_CODE_VERSION


def test_checkpoint_materialization_shows_the_lineage(chain):
    instance, _, ckpt, _ = chain
    record = latest_materialization(instance, "eagle3_checkpoint", RUN)
    # The chain as a Markdown table: each upstream partition's data version and a link to its run.
    prompts = latest_materialization(instance, "prompts", PARTITION)
    assert (
        f"| prompts | {PARTITION} | `{prompts['data_version']}` | {prompts['code_version']} | "
        f"[{prompts['run_id'][:8]}](/runs/{prompts['run_id']}) |"
    ) in record["metadata"]["lineage"].splitlines()
    # The record's sha256, in the materialization and beside the record.
    digest = file_sha256(ckpt / LINEAGE_FILE)
    assert record["metadata"][LINEAGE_DIGEST_KEY] == digest
    assert (ckpt / LINEAGE_DIGEST_FILE).read_text().split() == [digest, LINEAGE_FILE]


def test_show_prints_the_chain(chain):
    _, _, ckpt, _ = chain
    result = runner.invoke(app, ["lineage", "show", str(ckpt)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    order = [
        next(i for i, line in enumerate(lines) if asset in line)
        for asset in ("prompts[", "reasoning_samples[", "token_sequences[", "hidden_states[", "eagle3_checkpoint")
    ]
    assert order == sorted(order)
    # token_sequences' policy, per quality class too, is part of the chain.
    assert '"quality_policy": {' in lines[order[2]]
    # Where each upstream partition's files are: its version (the samples': recipe) folder.
    versions = read_lineage(ckpt)["versions"]
    assert (
        f"     files of {PARTITION}: "
        + ", ".join(f"{asset} {published_kind(asset)}/{versions[asset][PARTITION]}" for asset in PER_DATASET_STAGES)
        in lines
    )


def test_verify_passes_on_an_intact_chain(chain):
    _, _, ckpt, home = chain
    result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: lineage.json matches lineage.sha256; ")
    result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: lineage.json matches lineage.sha256 and the Dagster instance; ")


def test_verify_reads_the_weights_once(chain, monkeypatch):
    instance, _, ckpt, _ = chain
    reads = weight_reads(monkeypatch)
    result = verify_lineage(ckpt, instance=instance)
    assert result.problems == [] and result.notes == []
    assert reads == [ckpt / "model.safetensors"]  # content hash, record lookup and file check share it


def _edited(lineage: dict, edit: str) -> dict:
    if edit == "seed":
        lineage["training"]["settings"]["seed"] += 1
    elif edit == "hash":
        lineage["artifacts"][0]["sha256"] = "0" * 64
    elif edit == "artifact":
        lineage["artifacts"].pop()
    elif edit == "section":
        del lineage["run_ids"]
    return lineage


@pytest.mark.parametrize("edit", ["seed", "hash", "artifact", "section"])
@pytest.mark.parametrize("forged", [False, True], ids=["edited", "forged"])
def test_any_edit_of_the_lineage_record_fails_verify(chain, edit, forged):
    """A changed value, a changed hash, a removed entry or section: exit 1. ``forged`` also rewrites
    lineage.sha256 to match; the sha256 Dagster recorded at materialization still tells."""
    _, _, ckpt, home = chain
    record, digest_file = ckpt / LINEAGE_FILE, ckpt / LINEAGE_DIGEST_FILE
    original, original_digest = record.read_bytes(), digest_file.read_bytes()
    try:
        record.write_text(json.dumps(_edited(json.loads(original), edit), indent=2, sort_keys=True) + "\n")
        if forged:
            digest_file.write_text(f"{file_sha256(record)}  {LINEAGE_FILE}\n")
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": str(home)})
        assert result.exit_code == 1, result.output
        assert f"changed: lineage {LINEAGE_FILE}" in result.output
        assert ("Dagster recorded" if forged else "differs from lineage.sha256") in result.output, result.output
        if not forged:  # without the instance, lineage.sha256 alone catches an edit
            alone = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
            assert alone.exit_code == 1, alone.output
    finally:
        record.write_bytes(original)
        digest_file.write_bytes(original_digest)
    assert runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": str(home)}).exit_code == 0


def test_a_forged_seed_disagrees_with_training_json_even_without_the_instance(chain):
    _, _, ckpt, _ = chain
    record, digest_file = ckpt / LINEAGE_FILE, ckpt / LINEAGE_DIGEST_FILE
    original, original_digest = record.read_bytes(), digest_file.read_bytes()
    try:
        record.write_text(json.dumps(_edited(json.loads(original), "seed"), indent=2, sort_keys=True) + "\n")
        digest_file.write_text(f"{file_sha256(record)}  {LINEAGE_FILE}\n")
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
        assert result.exit_code == 1 and "training.settings" in result.output, result.output
    finally:
        record.write_bytes(original)
        digest_file.write_bytes(original_digest)


def test_the_kept_checkpoint_is_signed_and_a_forged_record_fails_with_the_key(chain):
    """Off the instance, only the signature catches a record edited with its sha256 rewritten to match."""
    _, _, ckpt, _ = chain
    assert (ckpt / LINEAGE_SIGNATURE_FILE).read_text().startswith("hmac-sha256 ")
    keyed = {KEY_ENV: KEY}  # the command's whole environment, as its context's obj: never set in os.environ
    result = runner.invoke(app, ["lineage", "verify", str(ckpt)], obj=keyed)
    assert result.exit_code == 0 and f"lineage.sha256 and {LINEAGE_SIGNATURE_FILE}" in result.output, result.output
    record, digest_file = ckpt / LINEAGE_FILE, ckpt / LINEAGE_DIGEST_FILE
    original, original_digest = record.read_bytes(), digest_file.read_bytes()
    try:
        forged = json.loads(original)
        forged["training"]["training_run"] = "another-run"
        record.write_text(json.dumps(forged, indent=2, sort_keys=True) + "\n")
        digest_file.write_text(f"{file_sha256(record)}  {LINEAGE_FILE}\n")
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)], obj=keyed)
        assert result.exit_code == 1 and f"signature: lineage {LINEAGE_SIGNATURE_FILE}" in result.output, result.output
        alone = runner.invoke(app, ["lineage", "verify", str(ckpt)], obj={})
        assert f"{LINEAGE_SIGNATURE_FILE} is present but unchecked" in alone.output, alone.output
    finally:
        record.write_bytes(original)
        digest_file.write_bytes(original_digest)


def test_a_missing_record_digest_fails_verify(chain):
    _, _, ckpt, _ = chain
    digest_file = ckpt / LINEAGE_DIGEST_FILE
    original = digest_file.read_bytes()
    try:
        digest_file.unlink()
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
        assert result.exit_code == 1 and f"vanished: lineage {LINEAGE_DIGEST_FILE}" in result.output
    finally:
        digest_file.write_bytes(original)


def test_the_checkpoint_folder_name_is_its_checkpoint_id(chain, tmp_path):
    """A kept folder is named by its checkpoint id (the content hash of its model files with its training
    run): a copy under that name verifies, under another hash-like name it is named as misnamed (from
    lineage.json alone: no instance)."""
    _, _, ckpt, _ = chain
    good = tmp_path / checkpoint_id(checkpoint_hash(ckpt), read_training_record(ckpt)["training_run"])[:16]
    assert good.name == ckpt.name
    shutil.copytree(ckpt, good)
    assert runner.invoke(app, ["lineage", "verify", str(good)], env={"DAGSTER_HOME": None}).exit_code == 0
    bad = tmp_path / ("0" * 16)
    shutil.copytree(ckpt, bad)
    result = runner.invoke(app, ["lineage", "verify", str(bad)], env={"DAGSTER_HOME": None})
    assert result.exit_code == 1 and "misnamed: eagle3_checkpoint" in result.output


@pytest.mark.parametrize(
    "pattern",
    [
        f"prompts/{PARTITION}/versions/*/prompts.parquet",
        f"reasoning_samples/{PARTITION}/recipes/*/shard-*.parquet",
        f"token_sequences/{PARTITION}/versions/*/sequences.parquet",
        f"hidden_states/{PARTITION}/versions/*/index.parquet",
        f"hidden_states/{PARTITION}/tensors/*.safetensors",
        "eagle3_checkpoint/[0-9a-f]*/model.safetensors",
        "eagle3_checkpoint/_work/data-*/token_freq.pt",
    ],
)
def test_one_changed_byte_is_named(chain, pattern):
    _, root, ckpt, _ = chain
    target = sorted(root.glob(pattern))[0]
    original = target.read_bytes()
    try:
        target.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)])
        assert result.exit_code == 1
        named = [line for line in result.output.splitlines() if line.startswith("changed: ")]
        assert len(named) == 1 and str(target) in named[0]
    finally:
        target.write_bytes(original)
    assert runner.invoke(app, ["lineage", "verify", str(ckpt)]).exit_code == 0


def test_a_repointed_training_link_is_named(chain):
    _, root, ckpt, _ = chain
    [links] = root.glob("eagle3_checkpoint/_work/data-*/hidden_states")
    first, second = sorted(links.iterdir())[:2]
    target = os.readlink(first)
    try:
        first.unlink()
        first.symlink_to(os.readlink(second))
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
        assert result.exit_code == 1 and f"changed: training_data {links.relative_to(root).as_posix()}" in result.output
    finally:
        first.unlink()
        first.symlink_to(target)


def test_a_deleted_artifact_is_named_as_vanished(chain):
    _, root, ckpt, _ = chain
    target = sorted(root.glob(f"hidden_states/{PARTITION}/tensors/*.safetensors"))[-1]
    original = target.read_bytes()
    try:
        target.unlink()
        assert [(p.kind, p.where) for p in verify_lineage(ckpt).problems] == [("vanished", target)]
        result = runner.invoke(app, ["lineage", "verify", str(ckpt)])
        assert (
            result.exit_code == 1 and f"vanished: hidden_states {target.relative_to(root).as_posix()}" in result.output
        )
    finally:
        target.write_bytes(original)


def test_a_moved_storage_root_verifies_with_root(chain, tmp_path):
    _, root, ckpt, _ = chain
    copy = tmp_path / "moved"
    shutil.copytree(root, copy, symlinks=True)  # as `mv` or `cp -a` would: links stay links
    moved_ckpt = copy / "eagle3_checkpoint" / ckpt.name
    assert runner.invoke(app, ["lineage", "verify", str(moved_ckpt), "--root", str(copy)]).exit_code == 0
    prompts = prompts_file(copy, PARTITION)
    prompts.write_bytes(b"not the prompts")
    result = runner.invoke(app, ["lineage", "verify", str(moved_ckpt), "--root", str(copy)])
    assert result.exit_code == 1 and prompts.relative_to(copy).as_posix() in result.output
