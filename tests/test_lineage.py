"""Lineage of a checkpoint, built from a real chain materialized on a temporary Dagster instance.

The chain: the real ``prompts`` asset (demo source), reasoning-sample shards written through the real
generation store (a stand-in for the vLLM capture, which needs a server), the real
``token_sequences`` and ``hidden_states`` assets on the tiny verifier, and a checkpoint stand-in that
builds the real training folder, writes weight files and records its lineage exactly as
``eagle3_checkpoint`` does (no training: that is tests/test_training.py's).
"""

# No `from __future__ import annotations`: Dagster reads the test assets' annotations at runtime.

import json
import os
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from safetensors.torch import save_file
from transformers import AutoTokenizer
from typer.testing import CliRunner

from upstream_rows import PARTITION, sample_row, write_samples

from eagle_assets.core.layout import LINEAGE_DIGEST_FILE, LINEAGE_FILE, PER_DATASET_STAGES
from eagle_assets.hidden_states import asset as hs_family
from eagle_assets.prompts import asset as prompts_family
from eagle_assets.token_sequences import asset as ts_family
from eagle_assets.cli import app
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.lineage import (
    LINEAGE_DIGEST_KEY,
    collect_lineage,
    dagster_input_version,
    latest_materialization,
    lineage_for_checkpoint,
    lineage_metadata,
    read_lineage,
    summary_lines,
    verify_lineage,
    write_lineage,
)
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier
from eagle_assets.core.files import combined_hash, file_sha256, write_json
from eagle_assets.eagle3_checkpoint.saved import checkpoint_hash, keep_checkpoint
from eagle_assets.eagle3_checkpoint.training_data import build_training_data

pytestmark = pytest.mark.integration
runner = CliRunner()


def chain_assets(tokenizer):
    partitions = source_partitions()

    @dg.asset(name="reasoning_samples", partitions_def=partitions, deps=["prompts"], code_version="test-samples-1")
    def reasoning_samples(context: dg.AssetExecutionContext, storage: StorageRoot) -> dg.MaterializeResult:
        """Samples the verifier could have written, stored through the real shard writer."""
        import pyarrow.parquet as pq

        prompts = pq.read_table(storage.path("prompts", context.partition_key) / "prompts.parquet").to_pylist()
        write_samples(storage, [sample_row(p, tokenizer, steps=2, sampling=json.dumps({"temperature": 0.0}))
                                for p in prompts])
        samples = load_samples(storage.path("reasoning_samples", context.partition_key))
        return dg.MaterializeResult(
            metadata={"ok": samples.num_rows, "reasoning_parser": "qwen3"},
            data_version=dg.DataVersion(combined_hash(samples["prompt_id"].to_pylist())[:16]),
        )

    @dg.asset(name="eagle3_checkpoint", deps=[dg.AssetDep(name, partition_mapping=dg.AllPartitionMapping())
                                              for name in ("token_sequences", "hidden_states")],
              code_version="test-ckpt-1")
    def eagle3_checkpoint(context: dg.AssetExecutionContext, storage: StorageRoot) -> dg.MaterializeResult:
        """The training folder, weight files, training.json, then lineage.json as the real asset writes them."""
        import torch

        data = build_training_data(storage.root, [PARTITION], storage.path("eagle3_checkpoint") / "_work")
        folder = storage.path("eagle3_checkpoint") / "ckpt"
        folder.mkdir()
        save_file({"w": torch.arange(8, dtype=torch.float32)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3"}))
        training = {"settings": {"epochs": 1, "lr": 1e-3, "seed": 0}, "code_version": "test-ckpt-1",
                    "data": {"folder": str(data.path)}}
        write_json(training, folder / "training.json")
        lineage = lineage_for_checkpoint(context, storage.root, [PARTITION], training=training,
                                         training_folder=data.path)
        digest = write_lineage(folder, lineage)
        return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(folder)), LINEAGE_DIGEST_KEY: digest,
                                              **lineage_metadata(lineage)})

    return [prompts_family.build(partitions)["assets"][0], reasoning_samples,
            *ts_family.build(partitions)["assets"], *hs_family.build(partitions)["assets"], eagle3_checkpoint]


@pytest.fixture(scope="module")
def chain(tiny_verifier, tmp_path_factory):
    """(instance, storage root, checkpoint folder), materialized once for the module."""
    base = tmp_path_factory.mktemp("lineage")
    storage = StorageRoot(root=str(base / "data"))
    resources = {"storage": storage, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu")}
    assets = chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))
    home = base / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        upstream = dg.materialize(assets, instance=instance, partition_key=PARTITION, resources=resources,
                                  selection=list(PER_DATASET_STAGES),
                                  run_config={"ops": {"prompts": {"config": {"limit": 6, "validation_fraction": 0.34}}}})
        assert upstream.success
        checkpoint = dg.materialize(assets, instance=instance, resources=resources, selection=["eagle3_checkpoint"])
        assert checkpoint.success
        yield instance, Path(storage.root), Path(storage.root) / "eagle3_checkpoint" / "ckpt", home


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
    assert set(links) == {("reasoning_samples", "prompts"), ("token_sequences", "prompts"),
                          ("token_sequences", "reasoning_samples"), ("hidden_states", "token_sequences")}
    assert all(link["consistent"] for link in links.values())
    samples_version = lineage["dagster"]["reasoning_samples"][PARTITION]["data_version"]
    consumed = lineage["dagster"]["token_sequences"][PARTITION]["input_data_versions"]["reasoning_samples"]
    assert consumed == dagster_input_version({PARTITION: samples_version})
    paths = {a["path"] for a in lineage["artifacts"]}
    assert f"prompts/{PARTITION}/prompts.parquet" in paths
    assert f"token_sequences/{PARTITION}/sequences.parquet" in paths
    assert any(p.startswith(f"reasoning_samples/{PARTITION}/shard-") for p in paths)
    assert any(p.startswith(f"hidden_states/{PARTITION}/tensors/") for p in paths)
    assert {f["path"] for f in lineage["checkpoint_files"]} == {"config.json", "model.safetensors", "training.json"}
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
    assert lineage["training"]["code_version"] == "test-ckpt-1"


def test_checkpoint_materialization_shows_the_lineage(chain):
    instance, _, ckpt, _ = chain
    record = latest_materialization(instance, "eagle3_checkpoint", None)
    # The chain as a Markdown table: each upstream partition's data version and a link to its run.
    prompts = latest_materialization(instance, "prompts", PARTITION)
    assert (f"| prompts | {PARTITION} | `{prompts['data_version']}` | {prompts['code_version']} | "
            f"[{prompts['run_id'][:8]}](/runs/{prompts['run_id']}) |") in record["metadata"]["lineage"].splitlines()
    # The record's sha256, in the materialization and beside the record.
    digest = file_sha256(ckpt / LINEAGE_FILE)
    assert record["metadata"][LINEAGE_DIGEST_KEY] == digest
    assert (ckpt / LINEAGE_DIGEST_FILE).read_text().split() == [digest, LINEAGE_FILE]


def test_show_prints_the_chain(chain):
    _, _, ckpt, _ = chain
    result = runner.invoke(app, ["lineage", "show", str(ckpt)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    order = [next(i for i, line in enumerate(lines) if asset in line)
             for asset in ("prompts[", "reasoning_samples[", "token_sequences[", "hidden_states[", "eagle3_checkpoint")]
    assert order == sorted(order)
    # token_sequences' policy, per quality class too, is part of the chain.
    assert '"quality_policy": {' in lines[order[2]]


def test_verify_passes_on_an_intact_chain(chain):
    _, _, ckpt, home = chain
    result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": None})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: lineage.json matches lineage.sha256; ")
    result = runner.invoke(app, ["lineage", "verify", str(ckpt)], env={"DAGSTER_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: lineage.json matches lineage.sha256 and the Dagster instance; ")


def _weight_reads(monkeypatch) -> list[Path]:
    """Every hashing of a ``model.safetensors`` from now on, by the modules that hash checkpoint files."""
    import eagle_assets.lineage
    import eagle_assets.eagle3_checkpoint.saved

    reads = []

    def counting(path):
        if Path(path).name == "model.safetensors":
            reads.append(Path(path))
        return file_sha256(path)

    for module in (eagle_assets.lineage, eagle_assets.eagle3_checkpoint.saved):
        monkeypatch.setattr(module, "file_sha256", counting)
    return reads


def test_verify_reads_the_weights_once(chain, monkeypatch):
    instance, _, ckpt, _ = chain
    reads = _weight_reads(monkeypatch)
    result = verify_lineage(ckpt, instance=instance)
    assert result.problems == [] and result.notes == []
    assert reads == [ckpt / "model.safetensors"]  # content hash, record lookup and file check share it


def test_keeping_a_checkpoint_reads_its_weights_once_and_returns_the_lineage_sha256(tmp_path, monkeypatch):
    import torch

    best = tmp_path / "best"
    best.mkdir()
    save_file({"w": torch.arange(8, dtype=torch.float32)}, str(best / "model.safetensors"))
    (best / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3"}))
    reads = _weight_reads(monkeypatch)
    folder, digest, lineage_sha256 = keep_checkpoint(
        best, tmp_path / "kept", {"training.json": {"seed": 0}},
        finish=lambda tmp, model_hashes: write_lineage(tmp, {"storage_root": str(tmp_path)}, model_hashes))
    assert reads == [best / "model.safetensors"]  # named the folder; the lineage record reuses it
    monkeypatch.undo()
    lineage = json.loads((folder / LINEAGE_FILE).read_text())
    assert folder.name == digest[:16] and lineage["checkpoint_hash"] == digest == checkpoint_hash(folder)
    assert {f["path"]: f["sha256"] for f in lineage["checkpoint_files"]} == {
        name: file_sha256(folder / name) for name in ("config.json", "model.safetensors", "training.json")}
    assert lineage_sha256 == file_sha256(folder / LINEAGE_FILE)
    assert (folder / LINEAGE_DIGEST_FILE).read_text() == f"{lineage_sha256}  {LINEAGE_FILE}\n"


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


def test_the_checkpoint_folder_name_is_its_content_hash(chain, tmp_path):
    """A kept folder is named by its content hash: a copy under that name verifies, under another
    hash-like name it is named as misnamed (from lineage.json alone: no instance)."""
    _, _, ckpt, _ = chain
    good = tmp_path / checkpoint_hash(ckpt)[:16]
    shutil.copytree(ckpt, good)
    assert runner.invoke(app, ["lineage", "verify", str(good)], env={"DAGSTER_HOME": None}).exit_code == 0
    bad = tmp_path / ("0" * 16)
    shutil.copytree(ckpt, bad)
    result = runner.invoke(app, ["lineage", "verify", str(bad)], env={"DAGSTER_HOME": None})
    assert result.exit_code == 1 and "misnamed: eagle3_checkpoint" in result.output


@pytest.mark.parametrize("pattern", [
    f"prompts/{PARTITION}/prompts.parquet",
    f"reasoning_samples/{PARTITION}/shard-*.parquet",
    f"token_sequences/{PARTITION}/sequences.parquet",
    f"hidden_states/{PARTITION}/index.parquet",
    f"hidden_states/{PARTITION}/tensors/*.safetensors",
    "eagle3_checkpoint/ckpt/model.safetensors",
    "eagle3_checkpoint/_work/data-*/token_freq.pt",
])
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
    _, root, _, _ = chain
    ckpt = root / "eagle3_checkpoint" / "ckpt"
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
        assert result.exit_code == 1 and f"vanished: hidden_states {target.relative_to(root).as_posix()}" in result.output
    finally:
        target.write_bytes(original)


def test_a_moved_storage_root_verifies_with_root(chain, tmp_path):
    _, root, ckpt, _ = chain
    copy = tmp_path / "moved"
    shutil.copytree(root, copy, symlinks=True)  # as `mv` or `cp -a` would: links stay links
    moved_ckpt = copy / "eagle3_checkpoint" / "ckpt"
    assert runner.invoke(app, ["lineage", "verify", str(moved_ckpt), "--root", str(copy)]).exit_code == 0
    (copy / "prompts" / PARTITION / "prompts.parquet").write_bytes(b"not the prompts")
    result = runner.invoke(app, ["lineage", "verify", str(moved_ckpt), "--root", str(copy)])
    assert result.exit_code == 1 and f"prompts/{PARTITION}/prompts.parquet" in result.output


def test_a_folder_without_lineage_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["lineage", "verify", str(tmp_path)])
    assert result.exit_code == 2 and LINEAGE_FILE in result.output
    (tmp_path / LINEAGE_FILE).write_text(json.dumps({"storage_root": "/x"}))
    result = runner.invoke(app, ["lineage", "show", str(tmp_path)])
    assert result.exit_code == 2 and "lacks partitions" in result.output


def test_an_upstream_rematerialized_after_use_is_flagged(tiny_verifier, tmp_path):
    storage = StorageRoot(root=str(tmp_path / "data"))
    assets = chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))[:2]  # prompts, reasoning_samples
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        def run(selection, limit):
            result = dg.materialize(assets, instance=instance, partition_key=PARTITION, resources={"storage": storage},
                                    selection=selection, run_config={"ops": {"prompts": {"config": {"limit": limit}}}})
            assert result.success

        run(["prompts", "reasoning_samples"], 4)
        run(["prompts"], 5)  # new prompts on disk; the samples were made from the old ones
        lineage = collect_lineage(instance, storage.root, [PARTITION])
    [link] = [link for link in lineage["links"] if link["input"] == "prompts"]
    assert link["asset"] == "reasoning_samples" and not link["consistent"]
    assert any(line.strip().startswith("! reasoning_samples[demo] consumed prompts") for line in summary_lines(lineage))
