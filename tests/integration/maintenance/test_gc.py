"""``eagle-assets gc`` on a real chain: two checkpoints trained by the real asset, upstream re-materialized.

The chain is the lineage tests' (tests/helpers/lineage.py: real prompts, reasoning-sample shards through
the real store, the real token_sequences, hidden_states and ``eagle3_checkpoint`` assets on the tiny
verifier), all recorded in one Dagster instance at $DAGSTER_HOME:

1. prompts seed 0 -> ... -> hidden_states, then checkpoint A;
2. prompts seed 1 -> ... -> hidden_states, then checkpoint B (new version folders beside A's, which
   stay as they were: both verify);
3. upstream re-materialized: reasoning_samples twice (the first new shards superseded, and B's too),
   hidden_states with other aux layers (a version folder no checkpoint records), then with the default
   ones again (B's version current again, the other layers' files unindexed).
"""

from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.layout import PER_DATASET_STAGES, current_version, index_file
from eagle_assets.core.partitions import add_training_run
from eagle_assets.core.units import human_bytes
from eagle_assets.lineage.record import read_lineage
from eagle_assets.maintenance.gc import find_garbage
from eagle_assets.resources import StorageRoot, Verifier
from tests.helpers.lineage import TRAIN, chain_assets
from tests.helpers.upstream import PARTITION

runner = CliRunner()
RUN = "gc"  # both checkpoints: one training run re-materialized on changed data


@pytest.fixture(scope="module")
def storage(tiny_verifier, tmp_path_factory):
    """(instance, storage root, [checkpoint A, checkpoint B]) with DAGSTER_HOME pointing at the instance."""
    base = tmp_path_factory.mktemp("gc")
    root = base / "data"
    home = base / "dagster_home"
    home.mkdir()
    assets = chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))

    def resources(**verifier):
        return {
            "storage": StorageRoot(root=str(root)),
            "verifier": Verifier(model_path=str(tiny_verifier), device="cpu", **verifier),
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:

            def upstream(seed, selection=PER_DATASET_STAGES, **verifier):
                config = (
                    {"ops": {"prompts": {"config": {"limit": 10, "seed": seed, "validation_fraction": 0.4}}}}
                    if "prompts" in selection
                    else {}
                )
                assert dg.materialize(
                    assets,
                    instance=instance,
                    partition_key=PARTITION,
                    run_config=config,
                    resources=resources(**verifier),
                    selection=list(selection),
                ).success

            add_training_run(instance, RUN)

            def checkpoint() -> Path:
                result = dg.materialize(
                    assets,
                    instance=instance,
                    resources=resources(),
                    selection=["eagle3_checkpoint"],
                    partition_key=RUN,
                    run_config={"ops": {"eagle3_checkpoint": {"config": TRAIN}}},
                )
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


def _indexed(root: Path) -> set[Path]:
    """The tensor files the current index lists."""
    folder = root / "hidden_states" / PARTITION
    return {folder / f for f in pq.read_table(index_file(root, PARTITION), columns=["file"])["file"].to_pylist()}


def _versions(root: Path) -> set[Path]:
    return set((root / "hidden_states" / PARTITION / "versions").iterdir())


def test_gc_frees_unreferenced_files_and_keeps_checkpoints_verifiable(storage):
    instance, root, (first, second) = storage
    assert first != second
    # Each materialization published its own files: the later ones rewrote nothing A recorded.
    _verify(first)
    _verify(second)
    recorded = {root / a["path"] for c in (first, second) for a in read_lineage(c)["artifacts"]}
    assert (
        current_version(root / "hidden_states" / PARTITION)
        == read_lineage(second)["versions"]["hidden_states"][PARTITION]
    )
    # The other aux layers' extraction: a version folder neither current nor recorded by a checkpoint.
    [other_layers] = [v for v in _versions(root) if not any(v in p.parents for p in recorded)]

    # Listing deletes nothing; what it lists is what no current materialization nor checkpoint needs.
    listing = runner.invoke(app, ["gc", "--root", str(root), "--verbose"])
    assert listing.exit_code == 0, listing.output
    garbage = find_garbage(root, instance)
    kinds = {g.kind for g in garbage.garbage}
    assert kinds == {"hidden-state file", "superseded shard", "version folder"}, listing.output
    assert [g.path for g in garbage.garbage if g.kind == "version folder"] == [other_layers]
    assert all(g.path.exists() and g.path not in recorded and g.path not in _indexed(root) for g in garbage.garbage)
    assert not any(g.path in p.parents for g in garbage.garbage for p in recorded)
    assert all(str(g.path.relative_to(root)) in listing.output for g in garbage.garbage)

    deleted = runner.invoke(app, ["gc", "--root", str(root), "--delete"])
    assert deleted.exit_code == 0, deleted.output
    assert f"freed {human_bytes(garbage.bytes)}" in deleted.output
    assert not any(g.path.exists() for g in garbage.garbage)
    assert all(path.exists() for path in _indexed(root))
    _verify(second)
    _verify(first)
    assert find_garbage(root, instance).garbage == []

    # Keeping only the newest checkpoint: the older one, its training folders and the features only
    # it recorded go; the newest still verifies.
    older = find_garbage(root, instance, keep_checkpoints=1)
    assert older.removed_checkpoints == [first] and older.kept_checkpoints == [second]
    assert {g.kind for g in older.garbage} == {"checkpoint", "training folder", "hidden-state file", "version folder"}
    first_versions = read_lineage(first)["versions"]
    assert {g.path for g in older.garbage if g.kind == "version folder"} == {
        root / asset / PARTITION / "versions" / first_versions[asset][PARTITION]
        for asset in ("prompts", "token_sequences", "hidden_states")
    }
    only_first = (
        {root / a["path"] for a in read_lineage(first)["artifacts"]}
        - {root / a["path"] for a in read_lineage(second)["artifacts"]}
        - _indexed(root)
    )
    assert {g.path for g in older.garbage if g.kind == "hidden-state file"} == {
        p for p in only_first if p.suffix == ".safetensors" and "/tensors/" in p.as_posix()
    }
    deleted = runner.invoke(app, ["gc", "--root", str(root), "--keep-checkpoints", "1", "--delete"])
    assert deleted.exit_code == 0, deleted.output
    assert not first.exists() and second.exists()
    _verify(second)
    training = read_lineage(second)["training"]["data"]
    assert Path(training["folder"]).is_dir()
    assert sorted(p.name for p in (root / "eagle3_checkpoint" / "_work").iterdir()) == sorted(
        {Path(training["folder"]).name, Path(read_lineage(second)["training"]["trainer"]["folder"]).name}
    )
