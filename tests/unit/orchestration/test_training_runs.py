"""Named training runs: the dynamic partition of eagle3_checkpoint and eagle3_eval, its CLI, the recipe a
run name stands for, and the named jobs over a graph with two kinds of partitions. (Two real runs side by
side, trained and evaluated: tests/e2e/test_evaluation.py.)"""

from __future__ import annotations

import dagster as dg
import pytest
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, EAGLE3_EVAL
from eagle_assets.core.partitions import TRAINING_RUNS, add_training_run, latest_checkpoint, latest_metadata

runner = CliRunner()


def test_a_training_run_is_added_once_and_named_plainly():
    with dg.DagsterInstance.ephemeral() as instance:
        assert add_training_run(instance, "kimi-k25-v1") and not add_training_run(instance, "kimi-k25-v1")
        assert instance.get_dynamic_partitions(TRAINING_RUNS) == ["kimi-k25-v1"]
        for bad in ("", "-lead", "a/b", "with space", "x" * 65):
            with pytest.raises(ValueError, match=r"training run name .* use 1-64 letters"):
                add_training_run(instance, bad)


def test_a_runs_latest_materialization_is_read_per_asset_as_plain_values(tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        add_training_run(instance, "a")
        with pytest.raises(dg.Failure, match="training run 'a' has no eagle3_checkpoint yet"):
            latest_checkpoint(instance, "a")
        for folder in ("first", "second"):
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    EAGLE3_CHECKPOINT,
                    partition="a",
                    metadata={"path": dg.MetadataValue.path(str(tmp_path / folder)), "recipe": {"lr": 1}},
                )
            )
        assert latest_checkpoint(instance, "a") == tmp_path / "second"
        assert latest_metadata(instance, EAGLE3_CHECKPOINT, "a") == {
            "path": str(tmp_path / "second"),
            "recipe": {"lr": 1},
        }
        assert latest_metadata(instance, EAGLE3_EVAL, "a") is None  # another asset of the same run
        assert latest_metadata(instance, EAGLE3_CHECKPOINT, "b") is None  # another run


def test_add_training_run_command_records_it_in_the_instance(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    added = runner.invoke(app, ["add-training-run", "lr-1e-3"])
    assert added.exit_code == 0 and "training run lr-1e-3 added" in added.output
    assert "exists already" in runner.invoke(app, ["add-training-run", "lr-1e-3"]).output
    refused = runner.invoke(app, ["add-training-run", "no/slash"])
    assert refused.exit_code == 2 and "training run name 'no/slash'" in refused.output
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions(TRAINING_RUNS) == ["lr-1e-3"]


def test_recipe_changes_name_each_setting_both_recipes_hold():
    from eagle_assets.eagle3_checkpoint.asset import recipe_changes

    recorded = {"lr": 3e-3, "epochs": 3, "partitions": []}
    assert recipe_changes(recorded, dict(recorded)) == []
    assert recipe_changes(recorded, {**recorded, "epochs": 2, "partitions": ["demo"]}) == [
        "epochs: 3 -> 2",
        "partitions: [] -> ['demo']",
    ]
    # A setting the code gained after the run was recorded does not change the run's recipe.
    assert recipe_changes(recorded, {**recorded, "new_setting": 1}) == []


def test_the_named_jobs_resolve_for_a_graph_of_dataset_and_training_run_partitions():
    """A Dagster job runs one partitions definition: `dataset` (per source) and `draft` (per training run)."""
    from eagle_assets.definitions import build_definitions
    from eagle_assets.orchestration.jobs import DATASET, DRAFT, plan

    defs = build_definitions()
    per_dataset, draft = plan(defs)
    assert [k.to_user_string() for k in draft] == ["eagle3_checkpoint", "eagle3_eval"]
    assert defs.resolve_job_def(DRAFT).partitions_def == dg.DynamicPartitionsDefinition(name=TRAINING_RUNS)
    assert defs.resolve_job_def(DATASET).partitions_def.get_partition_keys()[0] == "demo"
    for key in [*per_dataset, *draft]:
        defs.resolve_job_def(f"stage_{key.to_python_identifier()}")


def test_checkpoints_command_on_an_empty_root_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    listed = runner.invoke(app, ["checkpoints", "--root", str(tmp_path)])
    assert listed.exit_code == 0 and "no kept checkpoint: materialize eagle3_checkpoint" in listed.output
