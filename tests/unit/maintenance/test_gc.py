"""``eagle-assets gc`` on hand-made folders and instances: refusals, the reconcile it does first, and
how it names and keeps what sits under eagle3_checkpoint/_work."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import dagster as dg
from typer.testing import CliRunner

from eagle_assets.cli import app
from eagle_assets.maintenance.gc import find_garbage

runner = CliRunner()


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
        run = instance.add_run(
            dg.DagsterRun(
                job_name="killed",
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                tags=worker_tags(killed.pid),
            )
        )
    result = runner.invoke(
        app, ["gc", "--root", str(tmp_path / "data"), "--delete", "--state-dir", str(tmp_path / "servers")]
    )
    assert result.exit_code == 0, result.output
    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE


def test_work_folders_are_named_by_what_they_are(tmp_path):
    """Under eagle3_checkpoint/_work: training data and run folders, a nested verifier's resolved folder
    (training_verifier's), and a killed writer's temporary, each listed as what it is."""
    from eagle_assets.maintenance.gc import report_lines

    work = tmp_path / "eagle3_checkpoint" / "_work"
    for name in ("data-0123", "trainer-4567", "verifier-89ab", ".verifier-89ab.x1y2"):
        (work / name).mkdir(parents=True)
    with dg.DagsterInstance.ephemeral() as instance:
        collection = find_garbage(tmp_path, instance)
    assert {g.path.name: g.kind for g in collection.garbage} == {
        "data-0123": "training folder",
        "trainer-4567": "training folder",
        "verifier-89ab": "resolved verifier",
        ".verifier-89ab.x1y2": "temporary",
    }
    assert any(
        line.startswith("resolved verifier  eagle3_checkpoint/_work/verifier-89ab") for line in report_lines(collection)
    )


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
    (checkpoint / "config.json").write_text(
        json.dumps({"speculators_config": {"verifier": {"name_or_path": str(named)}}})
    )
    with dg.DagsterInstance.ephemeral() as instance:
        assert {g.path for g in find_garbage(tmp_path, instance).garbage} == {other}
        assert {g.path for g in find_garbage(tmp_path, instance, keep_checkpoints=0).garbage} == {
            checkpoint,
            named,
            other,
        }
