"""The ``prompts`` asset, materialized for real with ``dg.materialize``."""

from __future__ import annotations

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest

from eagle_assets import hookimpl
from eagle_assets.core.layout import prompts_file
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.plugin_manager import pm
from eagle_assets.prompts import asset as prompts_family
from eagle_assets.prompts.asset import CODE_VERSION
from eagle_assets.prompts.records import PROMPTS_SCHEMA
from eagle_assets.sources import DatasetSource, RawRecord


def prompts_asset(partitions=None):
    return prompts_family.build(partitions or source_partitions())["assets"][0]


def materialize(storage_root, partition, config=None, extra_assets=(), partitions=None):
    run_config = {"ops": {"prompts": {"config": config}}} if config else None
    return dg.materialize(
        [prompts_asset(partitions), *extra_assets],
        partition_key=partition,
        resources={"storage": storage_root},
        run_config=run_config,
        raise_on_error=False,
    )


def materialization(result):
    [mat] = result.asset_materializations_for_node("prompts")
    return mat


def numbers(mat):
    return {k: v.value for k, v in mat.metadata.items() if isinstance(v, (dg.IntMetadataValue, dg.BoolMetadataValue))}


def failure_text(result) -> str:
    [event] = result.get_step_failure_events()
    data = event.step_failure_data
    return (data.user_failure_data.description if data.user_failure_data else "") or data.error.message


def table(storage_root, partition):
    return pq.read_table(prompts_file(storage_root.root, partition))


def test_demo_partition_writes_the_contract_schema_with_counts_and_versions(storage_root):
    result = materialize(storage_root, "demo")
    assert result.success
    mat = materialization(result)
    t = table(storage_root, "demo")
    assert t.schema == PROMPTS_SCHEMA
    n = numbers(mat)
    assert n["rows_read"] == 720
    assert n["rows_kept"] == t.num_rows == n["rows_read"] - n["duplicates"] - n["skipped"]
    assert n["duplicates"] > 0  # the generated arithmetic set repeats a few questions
    assert n["skipped"] == 0 and n["skipped_not_utf8"] == 0
    assert n["train"] + n["validation"] + n["heldout"] == t.num_rows and n["validation"] > 0 and n["heldout"] > 0
    assert n["groups"] < t.num_rows  # some problems are asked in several wordings: one group each
    assert len(set(t.column("prompt_id").to_pylist())) == t.num_rows
    assert mat.tags["dagster/code_version"] == CODE_VERSION
    assert set(t.column("source").to_pylist()) == {"demo"}
    # Same data, same version: a re-run is recognisably the same content.
    again = materialization(materialize(storage_root, "demo"))
    assert again.tags["dagster/data_version"] == mat.tags["dagster/data_version"]
    # The table is in the version folder that data version names, and that is current.
    path = prompts_file(storage_root.root, "demo")
    assert mat.metadata["path"].value == str(path) and path.parent.name == mat.tags["dagster/data_version"]
    assert {c.check_name: c.passed for c in result.get_asset_check_evaluations()} == {
        "source_read_completely": True,
        "has_prompts": True,
    }


def test_limit_is_a_seeded_sample_in_dataset_order(storage_root):
    materialize(storage_root, "demo")
    all_ids = table(storage_root, "demo").column("prompt_id").to_pylist()

    def sample(seed):
        assert materialize(storage_root, "demo", {"limit": 50, "seed": seed}).success
        return table(storage_root, "demo").column("prompt_id").to_pylist()

    first, same, other = sample(1), sample(1), sample(2)
    assert len(first) == 50 and first == same and first != other
    positions = [all_ids.index(i) for i in first]
    assert positions == sorted(positions)
    assert positions[-1] > 100  # a sample of the whole set, not its head


def test_split_fractions_are_configurable_and_checked(storage_root):
    materialize(storage_root, "demo", {"heldout_fraction": 0.5, "validation_fraction": 0.2})
    splits = table(storage_root, "demo").column("split").to_pylist()
    assert 0.4 < splits.count("heldout") / len(splits) < 0.6
    assert 0.13 < splits.count("validation") / len(splits) < 0.27
    result = materialize(storage_root, "demo", {"heldout_fraction": 0.6, "validation_fraction": 0.4})
    assert not result.success and "leaves no train split" in failure_text(result)


def test_an_evaluation_only_source_is_all_heldout(storage_root):
    assert materialize(storage_root, "demo_ood").success
    t = table(storage_root, "demo_ood")
    assert t.num_rows > 0 and set(t.column("split").to_pylist()) == {"heldout"}


def test_bad_rows_and_duplicates_are_counted_by_reason_and_listed(storage_root, tmp_path):
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                json.dumps(good).encode(),
                json.dumps(good).encode(),  # duplicate
                json.dumps({"messages": [{"role": "assistant", "content": "orphan"}]}).encode(),
                json.dumps({"messages": [{"role": "user", "content": ""}]}).encode(),
                b"{not json",
                b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',
            ]
        )
    )
    result = materialize(storage_root, "jsonl", {"location": str(path)})
    assert result.success
    mat = materialization(result)
    n = numbers(mat)
    assert (n["rows_read"], n["rows_kept"], n["duplicates"], n["skipped"]) == (6, 1, 1, 4)
    assert (n["skipped_no_user_turn"], n["skipped_empty_content"], n["skipped_unreadable"], n["skipped_not_utf8"]) == (
        1,
        1,
        1,
        1,
    )
    examples = mat.metadata["skipped_examples"].value
    assert "source 'jsonl', row mixed.jsonl:3: no_user_turn" in examples
    listed = json.loads((prompts_file(storage_root.root, "jsonl").parent / "skipped.json").read_text())
    assert [s["row"] for s in listed] == ["mixed.jsonl:3", "mixed.jsonl:4", "mixed.jsonl:5", "mixed.jsonl:6"]


def test_missing_file_fails_with_the_source_and_the_fix(storage_root, tmp_path):
    result = materialize(storage_root, "jsonl", {"location": str(tmp_path / "absent.jsonl")})
    assert not result.success
    text = failure_text(result)
    assert "source 'jsonl'" in text and "absent.jsonl" in text and "does not exist" in text


def test_unreadable_parquet_fails_clearly(storage_root, tmp_path):
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    result = materialize(storage_root, "parquet", {"location": str(bad)})
    assert not result.success
    assert "source 'parquet'" in failure_text(result) and "not a readable Parquet file" in failure_text(result)


def test_unknown_source_fails_with_the_registered_names(storage_root):
    result = materialize(storage_root, "ghost", partitions=dg.StaticPartitionsDefinition(["ghost"]))
    assert not result.success
    assert "unknown dataset source 'ghost'" in failure_text(result) and "demo" in failure_text(result)


class Flaky:
    """A throwaway plugin whose source raises after three rows."""

    class Source(DatasetSource):
        def records(self, location=None):
            for i in range(3):
                yield RawRecord(f"row{i}", {"messages": [{"role": "user", "content": f"question {i}"}]})
            raise ConnectionError("network dropped")

    @hookimpl
    def register_dataset_sources(self, register):
        register(self.Source(name="flaky", description="fails part-way"))


@pytest.fixture
def flaky_plugin():
    plugin = Flaky()
    pm.register(plugin, name="flaky-test-plugin")
    yield
    pm.unregister(plugin)


def test_a_source_raising_midway_keeps_its_rows_and_blocks_downstream(storage_root, flaky_plugin):
    partitions = source_partitions()
    assert "flaky" in partitions.get_partition_keys()

    @dg.asset(deps=["prompts"], partitions_def=partitions)
    def downstream() -> None:
        """Would consume the prompts."""

    result = materialize(storage_root, "flaky", extra_assets=[downstream], partitions=partitions)
    mat = materialization(result)
    assert numbers(mat)["rows_kept"] == 3 and numbers(mat)["source_complete"] is False
    error = mat.metadata["source_error"].value
    assert "source 'flaky'" in error and "ConnectionError: network dropped" in error and "row2" in error
    assert table(storage_root, "flaky").num_rows == 3
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {name: c.passed for name, c in checks.items()} == {"source_read_completely": False, "has_prompts": True}
    assert "after 3 rows" in checks["source_read_completely"].description  # what failed, then what to change
    assert "`location`" in checks["source_read_completely"].metadata["what_to_change"].value
    assert not result.asset_materializations_for_node("downstream")  # the blocking check stopped it
