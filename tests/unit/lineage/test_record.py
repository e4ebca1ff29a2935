"""The lineage record on hand-made folders and a short chain: the sha256 beside it, a folder without one,
an upstream re-materialized after it was used."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
from safetensors.torch import save_file
from transformers import AutoTokenizer
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.files import checkpoint_hash, checkpoint_id, file_sha256
from eagle_assets.core.layout import LINEAGE_DIGEST_FILE, LINEAGE_FILE
from eagle_assets.eagle3_checkpoint.saved import keep_checkpoint
from eagle_assets.lineage.artifacts import stored_versions
from eagle_assets.lineage.collect import collect_lineage
from eagle_assets.lineage.record import write_lineage
from eagle_assets.lineage.render import summary_lines
from eagle_assets.resources import StorageRoot
from tests.helpers.lineage import chain_assets, weight_reads
from tests.helpers.upstream import PARTITION

runner = CliRunner()


def test_keeping_a_checkpoint_reads_its_weights_once_and_returns_the_lineage_sha256(tmp_path, monkeypatch):
    import torch

    best = tmp_path / "best"
    best.mkdir()
    save_file({"w": torch.arange(8, dtype=torch.float32)}, str(best / "model.safetensors"))
    (best / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3"}))
    reads = weight_reads(monkeypatch)
    folder, digest, lineage_sha256 = keep_checkpoint(
        best,
        tmp_path / "kept",
        "v1",
        {"training.json": {"seed": 0, "training_run": "v1"}},
        finish=lambda tmp, model_hashes: write_lineage(tmp, {"storage_root": str(tmp_path)}, model_hashes),
    )
    assert reads == [best / "model.safetensors"]  # named the folder; the lineage record reuses it
    monkeypatch.undo()
    lineage = json.loads((folder / LINEAGE_FILE).read_text())
    assert folder.name == digest[:16] and digest == checkpoint_id(checkpoint_hash(folder), "v1")
    assert lineage["checkpoint_hash"] == checkpoint_hash(folder)
    assert {f["path"]: f["sha256"] for f in lineage["checkpoint_files"]} == {
        name: file_sha256(folder / name) for name in ("config.json", "model.safetensors", "training.json")
    }
    assert lineage_sha256 == file_sha256(folder / LINEAGE_FILE)
    assert (folder / LINEAGE_DIGEST_FILE).read_text() == f"{lineage_sha256}  {LINEAGE_FILE}\n"


def test_a_folder_without_lineage_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["lineage", "verify", str(tmp_path)])
    assert result.exit_code == 2 and LINEAGE_FILE in result.output
    (tmp_path / LINEAGE_FILE).write_text(json.dumps({"storage_root": "/x"}))
    result = runner.invoke(app, ["lineage", "show", str(tmp_path)])
    assert result.exit_code == 2 and "lacks partitions" in result.output


def test_an_upstream_rematerialized_after_use_is_flagged_and_a_training_record_lists_what_it_read(
    quick_tiny_verifier, tmp_path
):
    storage = StorageRoot(root=str(tmp_path / "data"))
    assets = chain_assets(AutoTokenizer.from_pretrained(quick_tiny_verifier))[:2]  # prompts, reasoning_samples
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:

        def run(selection, limit) -> str:
            result = dg.materialize(
                assets,
                instance=instance,
                partition_key=PARTITION,
                resources={"storage": storage},
                selection=selection,
                run_config={"ops": {"prompts": {"config": {"limit": limit}}}},
            )
            assert result.success
            return result.run_id

        first = run(["prompts", "reasoning_samples"], 4)
        trained_on = stored_versions(Path(storage.root), [PARTITION])  # as a training would have read them
        second = run(["prompts"], 5)  # new prompts on disk; the samples were made from the old ones
        lineage = collect_lineage(instance, storage.root, [PARTITION])
        while_training = collect_lineage(
            instance, storage.root, [PARTITION], training={"data": {"upstream_versions": trained_on}}
        )
    old, new = trained_on["prompts"][PARTITION], lineage["versions"]["prompts"][PARTITION]
    assert old != new
    [link] = [link for link in lineage["links"] if link["input"] == "prompts"]
    assert link["asset"] == "reasoning_samples" and not link["consistent"]
    assert any(line.strip().startswith("! reasoning_samples[demo] consumed prompts") for line in summary_lines(lineage))
    assert lineage["changed_while_training"] == []
    assert lineage["dagster"]["prompts"][PARTITION]["run_id"] == second
    # Re-materialized while a checkpoint trained on the old version: the record is of the old version (its
    # files, the materialization that published it, a consistent chain) and names the newer one.
    assert while_training["changed_while_training"] == [
        {"asset": "prompts", "partition": PARTITION, "trained_on": old, "current": new, "trained_on_stored": True}
    ]
    assert while_training["versions"] == trained_on
    assert while_training["dagster"]["prompts"][PARTITION]["run_id"] == first
    assert while_training["run_ids"]["prompts[demo]"] == first
    assert while_training["links"] and all(link["consistent"] for link in while_training["links"])
    prompts_files = {a["path"] for a in while_training["artifacts"] if a["asset"] == "prompts"}
    assert prompts_files and all(f"/versions/{old}/" in path for path in prompts_files)
    assert {a["path"] for a in lineage["artifacts"] if a["asset"] == "prompts"}.isdisjoint(prompts_files)
    lines = [line.strip() for line in summary_lines(while_training)]
    flagged = (
        f"! prompts[demo] was re-materialized while the checkpoint trained: this record lists version {old}, "
        f"the one it trained on ({new} is current)"
    )
    assert flagged in lines
    assert not any("consumed prompts" in line for line in lines)
