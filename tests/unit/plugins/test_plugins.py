"""Plugins: the CLI listing, partitions that follow the registry, failure isolation, both examples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from eagle_assets import hookimpl, plugin_manager
from eagle_assets.core.layout import prompts_file
from eagle_assets.definitions import build_definitions
from eagle_assets.plugin_manager import dataset_sources, load_errors, pm
from eagle_assets.sources import DatasetSource, RawRecord

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
BUILT_IN_SOURCES = {"demo", "demo_ood", "jsonl", "parquet", "open_perfectblend"}


def materialize_prompts(defs, partition):
    """Only ``prompts``: the rest of the graph (generation, training) is not what these tests are about."""
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(partition_key=partition, asset_selection=[dg.AssetKey("prompts")])


@pytest.fixture
def reload_plugins():
    """Reload the plugin manager under this process's environment with ``env`` over it (None: unset), and
    restore it afterwards. The environment is a mapping of the test's own: the background resources' processes
    inherit os.environ, and load plugins too (docs/tests.md)."""

    def reload(**env):
        environ = {**os.environ, **env}
        plugin_manager.load_plugins({key: value for key, value in environ.items() if value is not None})

    yield reload
    plugin_manager.load_plugins()


def test_cli_lists_the_four_built_in_sources_as_json():
    out = subprocess.run(
        [str(Path(sys.executable).with_name("eagle-assets")), "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out)
    assert {s["name"] for s in report["dataset_sources"]} >= BUILT_IN_SOURCES
    by_name = {p["name"]: p for p in report["plugins"]}
    assert by_name["eagle_assets.plugins.local_files"]["dataset_sources"] == ["jsonl", "parquet"]
    assert by_name["eagle_assets.plugins.demo_source"]["hooks"] == ["register_dataset_sources"]
    assert report["load_errors"] == []


class Throwaway:
    @hookimpl
    def register_dataset_sources(self, register):
        register(Constant(name="throwaway", description="registered by a test"))


class Constant(DatasetSource):
    def records(self, location=None):
        yield RawRecord("0", {"messages": [{"role": "user", "content": "Is this a partition?"}]})


def test_a_registered_plugin_becomes_a_partition_of_prompts(storage_root):
    plugin = Throwaway()
    pm.register(plugin, name="throwaway-plugin")
    try:
        defs = build_definitions({"storage": storage_root})
        keys = defs.resolve_assets_def("prompts").partitions_def.get_partition_keys()
        assert "throwaway" in keys and set(keys) >= BUILT_IN_SOURCES
        assert materialize_prompts(defs, "throwaway").success
        assert pq.read_table(prompts_file(storage_root.root, "throwaway")).num_rows == 1
    finally:
        pm.unregister(plugin)
    assert "throwaway" not in build_definitions().resolve_assets_def("prompts").partitions_def.get_partition_keys()


def test_failing_plugins_are_reported_by_name_while_the_rest_load(reload_plugins, tmp_path):
    broken_file = tmp_path / "broken_plugin.py"
    broken_file.write_text("raise RuntimeError('boom at import')\n")
    raising_hook = tmp_path / "raising_hook.py"
    raising_hook.write_text(
        "from eagle_assets import hookimpl\n"
        "@hookimpl\n"
        "def register_dataset_sources(register):\n"
        "    raise ValueError('cannot reach my bucket')\n"
    )
    reload_plugins(EAGLE_ASSETS_PLUGINS=f"no_such_plugin_module, {broken_file}, {raising_hook}")
    assert set(dataset_sources()) >= BUILT_IN_SOURCES
    errors = {e.plugin: e.error for e in load_errors}
    assert "ModuleNotFoundError" in errors["no_such_plugin_module"]
    assert "boom at import" in errors[str(broken_file)]
    assert "register_dataset_sources: ValueError: cannot reach my bucket" in errors[str(raising_hook)]
    # The code location still loads, with every working partition.
    keys = build_definitions().resolve_assets_def("prompts").partitions_def.get_partition_keys()
    assert set(keys) >= BUILT_IN_SOURCES


def test_single_file_example_plugin(reload_plugins, storage_root):
    reload_plugins(EAGLE_ASSETS_PLUGINS=str(EXAMPLES / "single_file_plugin" / "sample_source.py"))
    assert "csv_qa" in dataset_sources()
    defs = build_definitions({"storage": storage_root})
    assert materialize_prompts(defs, "csv_qa").success
    rows = pq.read_table(prompts_file(storage_root.root, "csv_qa")).to_pylist()
    assert len(rows) == 5 and rows[0]["reference"] == "Rome."
    assert json.loads(rows[0]["metadata"])["topic"] == "geography"


def test_package_example_plugin_installs_with_an_entry_point(reload_plugins, tmp_path, monkeypatch):
    source_tree = tmp_path / "src"
    shutil.copytree(EXAMPLES / "plugin_package", source_tree)  # builds write egg-info into the tree
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source_tree),
        ],
        check=True,
    )
    monkeypatch.syspath_prepend(str(target))
    reload_plugins(EAGLE_ASSETS_DISABLE_ENTRY_POINTS="")
    assert plugin_manager.origin("trivia") == plugin_manager.PluginOrigin("entry point", "0.2.0")
    trivia = dataset_sources()["trivia"]
    assert [r.data["id"] for r in trivia.records()][:2] == ["trivia-0", "trivia-1"]
    # The switch that turns entry points off really does.
    reload_plugins(EAGLE_ASSETS_DISABLE_ENTRY_POINTS="1")
    assert "trivia" not in dataset_sources()
