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


def _materialized(instance, *assets: str, partition: str = "demo") -> None:
    for asset in assets:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=partition))


def _shard(folder, name: str, keys: list[tuple[str, int]]) -> None:
    import pyarrow as pa

    from eagle_assets.core.files import write_parquet

    rows = pa.table({"prompt_id": [p for p, _ in keys], "turn": pa.array([t for _, t in keys], pa.int32())})
    write_parquet(rows, folder / f"shard-{name}.parquet")


def test_published_folders_go_unless_current_or_recorded_and_take_their_files_with_them(tmp_path):
    """Version folders (prompts, token_sequences, hidden_states) and recipe folders (reasoning_samples) are
    garbage when neither current nor holding a file a kept checkpoint's lineage records; the hidden-state
    files only such versions index go too, and a recipe's shards are superseded per (prompt, turn)."""
    import json

    import pyarrow as pa

    from eagle_assets.core.files import publish_version, write_json, write_parquet
    from eagle_assets.core.layout import CURRENT_FILE
    from eagle_assets.maintenance.gc import report_lines

    prompts, hidden = tmp_path / "prompts" / "demo", tmp_path / "hidden_states" / "demo"
    for version in ("0" * 16, "2" * 16, "1" * 16):  # the last published is current
        publish_version(prompts, version, lambda tmp: (tmp / "prompts.parquet").write_bytes(b"rows"))
    tensors = hidden / "tensors"
    tensors.mkdir(parents=True)
    for name in ("old", "current", "recorded", "never"):
        (tensors / f"{name}.safetensors").write_bytes(name.encode())
    for version, indexed in (("a" * 16, "old"), ("c" * 16, "recorded"), ("b" * 16, "current")):
        index = pa.table({"file": [f"tensors/{indexed}.safetensors"]})
        publish_version(hidden, version, lambda tmp, index=index: write_parquet(index, tmp / "index.parquet"))
    samples = tmp_path / "reasoning_samples" / "demo"
    current, other = samples / "recipes" / ("e" * 16), samples / "recipes" / ("f" * 16)
    for recipe in (current, other):
        recipe.mkdir(parents=True)
    _shard(current, "1", [("p", 0), ("p", 1)])  # p's turn 0 is latest here: live
    _shard(current, "2", [("p", 1)])
    _shard(current, "3", [("q", -1)])  # superseded by shard 4
    _shard(current, "4", [("q", -1)])
    _shard(other, "1", [("p", -1), ("q", -1), ("r", -1)])
    write_json({"version": current.name}, samples / CURRENT_FILE)

    checkpoint = tmp_path / "eagle3_checkpoint" / "0123456789abcdef"
    checkpoint.mkdir(parents=True)
    recorded = [f"prompts/demo/versions/{'2' * 16}/prompts.parquet", "hidden_states/demo/tensors/recorded.safetensors"]
    recorded.append(f"hidden_states/demo/versions/{'c' * 16}/index.parquet")
    (checkpoint / "lineage.json").write_text(json.dumps({"artifacts": [{"path": p} for p in recorded]}))

    with dg.DagsterInstance.ephemeral() as instance:
        _materialized(instance, "prompts", "reasoning_samples", "hidden_states")
        collection = find_garbage(tmp_path, instance)
        assert {(g.kind, g.path.relative_to(tmp_path).as_posix()) for g in collection.garbage} == {
            ("version folder", f"prompts/demo/versions/{'0' * 16}"),
            ("version folder", f"hidden_states/demo/versions/{'a' * 16}"),
            ("hidden-state file", "hidden_states/demo/tensors/old.safetensors"),
            ("hidden-state file", "hidden_states/demo/tensors/never.safetensors"),
            ("recipe folder", f"reasoning_samples/demo/recipes/{'f' * 16}"),
            ("superseded shard", f"reasoning_samples/demo/recipes/{'e' * 16}/shard-3.parquet"),
        }
        [recipe] = [g for g in collection.garbage if g.kind == "recipe folder"]
        assert recipe.rows == 3
        assert f"recipe folder      reasoning_samples/demo/recipes/{'f' * 16}  " in "\n".join(report_lines(collection))
        assert any(line.endswith(", 3 samples") for line in report_lines(collection))
        # Without the checkpoint, what only it recorded goes too.
        dropped = {g.path.relative_to(tmp_path).as_posix() for g in find_garbage(tmp_path, instance, 0).garbage}
        assert {f"prompts/demo/versions/{'2' * 16}", f"hidden_states/demo/versions/{'c' * 16}"} <= dropped
        assert "hidden_states/demo/tensors/recorded.safetensors" in dropped


def test_a_killed_publication_is_a_temporary(tmp_path):
    """A version written but never renamed into place (a killed materialization) is a temporary; the
    current version is untouched."""
    from eagle_assets.core.files import publish_version

    prompts = tmp_path / "prompts" / "demo"
    publish_version(prompts, "1" * 16, lambda tmp: (tmp / "prompts.parquet").write_bytes(b"rows"))
    killed = prompts / "versions" / f".{'2' * 16}.x1y2.tmp"
    killed.mkdir()
    (killed / ".prompts.parquet.a1b2.tmp").write_bytes(b"half")  # its writer's own temporary: listed with it
    with dg.DagsterInstance.ephemeral() as instance:
        _materialized(instance, "prompts")
        assert [(g.kind, g.path) for g in find_garbage(tmp_path, instance).garbage] == [("temporary", killed)]
