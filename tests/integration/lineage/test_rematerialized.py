"""A kept checkpoint's lineage survives later materializations of its upstream: the chain of
tests/helpers/lineage.py (the real assets on the tiny verifier, samples written through the real store)
trained into checkpoint A, then re-materialized with other prompts and trained into checkpoint B, then
token_sequences and hidden_states re-materialized once more with another max_length. Each
materialization publishes a version folder of its own, so both checkpoints verify, gc lists nothing
either needs, and once A is no longer kept gc lists the version folders only A used.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.layout import PER_DATASET_STAGES, REASONING_SAMPLES, current_version, published_kind
from eagle_assets.core.partitions import add_training_run
from eagle_assets.lineage.record import read_lineage
from eagle_assets.lineage.verify import verify_lineage
from eagle_assets.maintenance.gc import RECIPE_FOLDER, VERSION_FOLDER, find_garbage, report_lines
from eagle_assets.resources import StorageRoot, Verifier
from tests.helpers.lineage import chain_assets, train_checkpoint
from tests.helpers.upstream import PARTITION

runner = CliRunner()
RUN = "rematerialized"  # both checkpoints: one training run, trained again on changed data
PROMPTS = {"limit": 6, "validation_fraction": 0.34}
VERSIONED = tuple(a for a in PER_DATASET_STAGES if a != REASONING_SAMPLES)  # the samples' set is per recipe


@pytest.fixture(scope="module")
def chain(tiny_verifier, tmp_path_factory):
    """(instance, storage root, checkpoint A, checkpoint B, DAGSTER_HOME)."""
    base = tmp_path_factory.mktemp("rematerialized")
    storage = StorageRoot(root=str(base / "data"))
    resources = {"storage": storage, "verifier": Verifier(model_path=str(tiny_verifier), device="cpu")}
    assets = chain_assets(AutoTokenizer.from_pretrained(tiny_verifier))
    home = base / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:

        def upstream(selection, **config) -> None:
            ops = {asset: {"config": settings} for asset, settings in config.items()}
            assert dg.materialize(
                assets,
                instance=instance,
                partition_key=PARTITION,
                resources=resources,
                selection=list(selection),
                run_config={"ops": ops},
            ).success

        add_training_run(instance, RUN)
        upstream(PER_DATASET_STAGES, prompts=PROMPTS)
        first = train_checkpoint(assets, instance, resources, RUN)
        upstream(PER_DATASET_STAGES, prompts={**PROMPTS, "seed": 1})  # other prompts: new rows everywhere
        second = train_checkpoint(assets, instance, resources, RUN)
        upstream(("token_sequences", "hidden_states"), token_sequences={"max_length": 64})  # shorter rows
        yield instance, Path(storage.root), first, second, home


def _versions(checkpoint: Path) -> dict[str, str]:
    return {asset: by_partition[PARTITION] for asset, by_partition in read_lineage(checkpoint)["versions"].items()}


def _recorded(root: Path, checkpoint: Path) -> set[Path]:
    return {root / a["path"] for a in read_lineage(checkpoint)["artifacts"]}


def _needs(root: Path, checkpoint: Path, garbage) -> list[Path]:
    """The items of ``garbage`` that are, or hold, a file ``checkpoint``'s lineage records."""
    recorded = _recorded(root, checkpoint)
    return [g.path for g in garbage if any(p == g.path or g.path in p.parents for p in recorded)]


def test_every_materialization_has_its_own_version_and_both_checkpoints_verify(chain):
    instance, root, first, second, home = chain
    a, b = _versions(first), _versions(second)
    current = {asset: current_version(root / asset / PARTITION) for asset in PER_DATASET_STAGES}
    for asset in VERSIONED:
        assert a[asset] != b[asset], asset  # the data changed, so did the version folder
        assert (root / asset / PARTITION / "versions" / a[asset]).is_dir()
    assert current["prompts"] == b["prompts"]
    assert current["token_sequences"] not in (a["token_sequences"], b["token_sequences"])
    assert current["hidden_states"] not in (a["hidden_states"], b["hidden_states"])
    assert a[REASONING_SAMPLES] == b[REASONING_SAMPLES] == current[REASONING_SAMPLES]  # one recipe, appended to
    for checkpoint in (first, second):
        verification = verify_lineage(checkpoint, instance=instance)
        assert verification.problems == [], [(p.kind, p.where) for p in verification.problems]
        result = runner.invoke(app, ["lineage", "verify", str(checkpoint)], env={"DAGSTER_HOME": str(home)})
        assert result.exit_code == 0 and result.output.startswith("ok: "), result.output


def test_gc_keeps_what_either_checkpoint_needs_and_then_frees_what_only_the_dropped_one_did(chain):
    instance, root, first, second, home = chain
    a, b = _versions(first), _versions(second)

    kept = find_garbage(root, instance)
    assert kept.kept_checkpoints == [second, first] and kept.removed_checkpoints == []
    assert _needs(root, first, kept.garbage) == [] and _needs(root, second, kept.garbage) == []
    assert {g.kind for g in kept.garbage} <= {"superseded shard", "temporary"}  # every version is current or kept

    dropped = find_garbage(root, instance, keep_checkpoints=1)
    assert dropped.kept_checkpoints == [second] and dropped.removed_checkpoints == [first]
    assert _needs(root, second, dropped.garbage) == []
    # Exactly A's versions: B's are kept by B, the latest by being current, and the samples' one recipe both.
    assert {g.path for g in dropped.garbage if g.kind == VERSION_FOLDER} == {
        root / asset / PARTITION / published_kind(asset) / a[asset] for asset in VERSIONED
    }
    assert not [g for g in dropped.garbage if g.kind == RECIPE_FOLDER]
    lines = report_lines(dropped)
    for asset in VERSIONED:
        assert any(line.startswith(f"version folder     {asset}/{PARTITION}/versions/{a[asset]}  ") for line in lines)

    deleted = runner.invoke(
        app,
        ["gc", "--root", str(root), "--keep-checkpoints", "1", "--delete", "--state-dir", str(home / "servers")],
        env={"DAGSTER_HOME": str(home)},
    )
    assert deleted.exit_code == 0, deleted.output
    assert not first.exists() and all(
        not (root / asset / PARTITION / "versions" / a[asset]).exists() for asset in VERSIONED
    )
    assert all((root / asset / PARTITION / "versions" / b[asset]).is_dir() for asset in VERSIONED)
    assert verify_lineage(second, instance=instance).problems == []
