"""``eagle-assets gc`` on a real chain: two checkpoints trained by the real asset, upstream re-materialized.

The chain is test_lineage's (real prompts, reasoning-sample shards through the real store, the real
token_sequences and hidden_states assets on the tiny verifier) with the real ``eagle3_checkpoint``
asset, all recorded in one Dagster instance at $DAGSTER_HOME:

1. prompts seed 0 -> ... -> hidden_states, then checkpoint A;
2. prompts seed 1 -> ... -> hidden_states, then checkpoint B (A's single-file inputs, prompts.parquet
   and the like, are rewritten in place: A no longer verifies fully, before any gc);
3. upstream re-materialized: reasoning_samples twice (the first new shards superseded, and B's too),
   hidden_states with other aux layers, then with the default ones again (the first files unindexed).
"""

# No `from __future__ import annotations`: Dagster reads the test assets' annotations at runtime.

import os
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from test_lineage import chain_assets
from upstream_rows import PARTITION

from eagle_assets.core.layout import PER_DATASET_STAGES
from eagle_assets.eagle3_checkpoint import asset as ckpt_family
from eagle_assets.capacity.plan import human_bytes
from eagle_assets.cli import app
from eagle_assets.maintenance.gc import find_garbage
from eagle_assets.lineage import read_lineage
from eagle_assets.orchestration.partitions import add_training_run, source_partitions
from eagle_assets.resources import StorageRoot, Verifier

pytestmark = pytest.mark.integration
runner = CliRunner()
TRAIN = {"epochs": 1, "draft_vocab_size": 64, "total_seq_len": 256}
RUN = "gc"  # both checkpoints: one training run re-materialized on changed data


@pytest.fixture(scope="module")
def storage(tiny_verifier, tmp_path_factory):
    """(instance, storage root, [checkpoint A, checkpoint B]) with DAGSTER_HOME pointing at the instance."""
    base = tmp_path_factory.mktemp("gc")
    root = base / "data"
    home = base / "dagster_home"
    home.mkdir()
    assets = [*chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))[:-1],
              *ckpt_family.build(source_partitions())["assets"]]

    def resources(**verifier):
        return {"storage": StorageRoot(root=str(root)),
                "verifier": Verifier(model_path=str(tiny_verifier), device="cpu", **verifier)}

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            def upstream(seed, selection=PER_DATASET_STAGES, **verifier):
                config = {"ops": {"prompts": {"config": {"limit": 10, "seed": seed, "validation_fraction": 0.4}}}} if "prompts" in selection else {}
                assert dg.materialize(assets, instance=instance, partition_key=PARTITION, run_config=config,
                                      resources=resources(**verifier), selection=list(selection)).success

            add_training_run(instance, RUN)

            def checkpoint() -> Path:
                result = dg.materialize(assets, instance=instance, resources=resources(), selection=["eagle3_checkpoint"],
                                        partition_key=RUN, run_config={"ops": {"eagle3_checkpoint": {"config": TRAIN}}})
                return Path(result.get_asset_materialization_events()[0].materialization.metadata["path"].value)

            upstream(0)
            first = checkpoint()
            upstream(1)
            second = checkpoint()
            upstream(1, selection=("reasoning_samples",))
            upstream(1, selection=("reasoning_samples", "hidden_states"), aux_layer_ids=[1, 2])
            upstream(1, selection=("hidden_states",))
            yield instance, root, [first, second]


def _verify(checkpoint: Path) -> None:
    result = runner.invoke(app, ["lineage", "verify", str(checkpoint)])
    assert result.exit_code == 0, result.output


def _problems(checkpoint: Path) -> set[str]:
    result = runner.invoke(app, ["lineage", "verify", str(checkpoint)])
    return {line for line in result.output.splitlines() if line.startswith(("changed:", "vanished:"))}


def _indexed(root: Path) -> set[Path]:
    folder = root / "hidden_states" / PARTITION
    return {folder / f for f in pq.read_table(folder / "index.parquet", columns=["file"])["file"].to_pylist()}


def test_gc_frees_unreferenced_files_and_keeps_checkpoints_verifiable(storage):
    instance, root, (first, second) = storage
    assert first != second
    _verify(second)
    # A's rewritten single files were never gc's doing; gc must not add a single problem to them.
    first_problems = _problems(first)
    assert first_problems and all(" prompts/" in p or "/demo/" in p and "tensors" not in p for p in first_problems)
    recorded = {root / a["path"] for c in (first, second) for a in read_lineage(c)["artifacts"]}

    # Listing deletes nothing; what it lists is what no current materialization nor checkpoint needs.
    listing = runner.invoke(app, ["gc", "--root", str(root), "--verbose"])
    assert listing.exit_code == 0, listing.output
    garbage = find_garbage(root, instance)
    kinds = {g.kind for g in garbage.garbage}
    assert kinds == {"hidden-state file", "superseded shard"}, listing.output
    assert all(g.path.exists() and g.path not in recorded and g.path not in _indexed(root) for g in garbage.garbage)
    assert all(str(g.path.relative_to(root)) in listing.output for g in garbage.garbage)

    deleted = runner.invoke(app, ["gc", "--root", str(root), "--delete"])
    assert deleted.exit_code == 0, deleted.output
    assert f"freed {human_bytes(garbage.bytes)}" in deleted.output
    assert not any(g.path.exists() for g in garbage.garbage)
    assert all(path.exists() for path in _indexed(root))
    _verify(second)
    assert _problems(first) == first_problems
    assert find_garbage(root, instance).garbage == []

    # Keeping only the newest checkpoint: the older one, its training folders and the features only
    # it recorded go; the newest still verifies.
    older = find_garbage(root, instance, keep_checkpoints=1)
    assert older.removed_checkpoints == [first] and older.kept_checkpoints == [second]
    assert {g.kind for g in older.garbage} == {"checkpoint", "training folder", "hidden-state file"}
    only_first = {root / a["path"] for a in read_lineage(first)["artifacts"]} - {
        root / a["path"] for a in read_lineage(second)["artifacts"]} - _indexed(root)
    assert {g.path for g in older.garbage if g.kind == "hidden-state file"} == {
        p for p in only_first if p.suffix == ".safetensors" and "/tensors/" in p.as_posix()}
    deleted = runner.invoke(app, ["gc", "--root", str(root), "--keep-checkpoints", "1", "--delete"])
    assert deleted.exit_code == 0, deleted.output
    assert not first.exists() and second.exists()
    _verify(second)
    training = read_lineage(second)["training"]["data"]
    assert Path(training["folder"]).is_dir()
    assert sorted(p.name for p in (root / "eagle3_checkpoint" / "_work").iterdir()) == sorted(
        {Path(training["folder"]).name, Path(read_lineage(second)["training"]["run"]["folder"]).name})


def test_gc_without_an_instance_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    result = runner.invoke(app, ["gc", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "set DAGSTER_HOME" in result.output
    assert not os.listdir(tmp_path)


def test_gc_reconciles_first_so_a_killed_run_does_not_block_it(tmp_path, monkeypatch):
    """A run killed on this host stays STARTED until someone reconciles: gc does first (the run is
    marked failed), so --delete is not refused for ever."""
    from eagle_assets.orchestration.worker import worker_tags

    (tmp_path / "home").mkdir()
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    with dg.DagsterInstance.get() as instance:
        run = instance.add_run(dg.DagsterRun(job_name="killed", run_id=str(uuid.uuid4()),
                                             status=dg.DagsterRunStatus.STARTED, tags=worker_tags(killed.pid)))
    result = runner.invoke(app, ["gc", "--root", str(tmp_path / "data"), "--delete",
                                 "--state-dir", str(tmp_path / "servers")])
    assert result.exit_code == 0, result.output
    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE


def test_work_folders_are_named_by_what_they_are(tmp_path):
    """Under eagle3_checkpoint/_work: training data and run folders, a nested verifier's resolved folder
    (training_verifier's), and a killed writer's temporary, each listed as what it is."""
    from eagle_assets.maintenance.gc import report_lines

    work = tmp_path / "eagle3_checkpoint" / "_work"
    for name in ("data-0123", "run-4567", "verifier-89ab", ".verifier-89ab.x1y2"):
        (work / name).mkdir(parents=True)
    with dg.DagsterInstance.ephemeral() as instance:
        collection = find_garbage(tmp_path, instance)
    assert {g.path.name: g.kind for g in collection.garbage} == {
        "data-0123": "training folder", "run-4567": "training folder", "verifier-89ab": "resolved verifier",
        ".verifier-89ab.x1y2": "temporary"}
    assert any(line.startswith("resolved verifier  eagle3_checkpoint/_work/verifier-89ab")
               for line in report_lines(collection))


def test_the_resolved_verifier_a_kept_checkpoint_names_is_kept(tmp_path):
    """A nested verifier's checkpoint names its resolved folder under _work as its verifier (speculators
    loads it from there): gc keeps that folder while the checkpoint is kept, and removes it with it."""
    import json

    work = tmp_path / "eagle3_checkpoint" / "_work"
    named, other = work / "verifier-89ab", work / "verifier-cdef"
    named.mkdir(parents=True)
    other.mkdir()
    checkpoint = tmp_path / "eagle3_checkpoint" / "0123456789abcdef"
    checkpoint.mkdir()
    (checkpoint / "lineage.json").write_text("{}")
    (checkpoint / "config.json").write_text(json.dumps(
        {"speculators_config": {"verifier": {"name_or_path": str(named)}}}))
    with dg.DagsterInstance.ephemeral() as instance:
        assert {g.path for g in find_garbage(tmp_path, instance).garbage} == {other}
        assert {g.path for g in find_garbage(tmp_path, instance, keep_checkpoints=0).garbage} == {
            checkpoint, named, other}
