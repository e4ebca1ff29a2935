"""``eagle-assets demo`` walks whatever graph the definitions hold: partitioned assets, then the rest."""
# No `from __future__ import annotations`: Dagster reads asset annotations at runtime.

import dagster as dg
import pyarrow.parquet as pq
import pytest

from eagle_assets.core.layout import prompts_file
from eagle_assets.demo.command import run_demo, summarize
from eagle_assets.orchestration.jobs import plan
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts_family


def test_demo_materializes_partitioned_then_unpartitioned_assets_in_order(storage_root):
    # The real prompts asset plus stand-ins, so the test is about the walk, not the later stages.
    [prompts] = prompts_family.build(source_partitions())["assets"]

    @dg.asset(deps=[prompts.key], partitions_def=prompts.partitions_def)
    def prompt_lengths(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Longest prompt of the partition (stands in for the per-dataset assets of later stages)."""
        table = pq.read_table(prompts_file(storage_root.root, context.partition_key))
        return dg.MaterializeResult(metadata={"prompts": table.num_rows})

    @dg.asset(deps=[prompt_lengths.key])
    def summary_over_all_partitions() -> dg.MaterializeResult:
        """Reads every partition (stands in for the checkpoint)."""
        return dg.MaterializeResult(metadata={"partitions_seen": len(list(storage_root.path("prompts").iterdir()))})

    defs = dg.Definitions(
        assets=[prompts, prompt_lengths, summary_over_all_partitions], resources={"storage": storage_root}
    )
    partitioned, unpartitioned = plan(defs)
    assert partitioned == [prompts.key, prompt_lengths.key]
    assert unpartitioned == [summary_over_all_partitions.key]

    with dg.DagsterInstance.ephemeral() as instance:
        results = run_demo(defs, instance, "demo")
        # The partition's assets; prompts of the evaluation-only demo_ood (eagle3_eval's out-of-distribution
        # set); then the assets over all partitions.
        assert [r.success for r in results] == [True, True, True]
        # Named jobs, so the UI's run list says what each run was.
        assert [r.dagster_run.job_name for r in results] == ["dataset", "stage_prompts", "draft"]
        lines = [line for r in results for line in summarize(r)]
        assert lines[0].startswith("prompts[demo] version ") and "rows_kept=" in lines[0]
        assert lines[1].startswith("prompt_lengths[demo]") and lines[2].startswith("prompts[demo_ood] version ")
        assert lines[3].startswith("summary_over_all_partitions ")
        record = instance.get_latest_materialization_event(summary_over_all_partitions.key)
        assert record.asset_materialization.metadata["partitions_seen"].value == 2


def test_demo_refuses_an_unknown_partition_with_the_known_ones(storage_root):
    [prompts] = prompts_family.build(source_partitions())["assets"]
    defs = dg.Definitions(assets=[prompts], resources={"storage": storage_root})
    with (
        dg.DagsterInstance.ephemeral() as instance,
        pytest.raises(ValueError, match=r"unknown partition 'nope'; the dataset sources are demo, demo_ood, jsonl"),
    ):
        run_demo(defs, instance, "nope")
