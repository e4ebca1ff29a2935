"""An eagle3_eval's report without a server: the numbers of each prompt set under its label, report.json,
the greedy outputs they were measured on, and the data version."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash
from eagle_assets.eagle3_eval.acceptance import build_report, write_report
from eagle_assets.eagle3_eval.eval_sets import EvalSet
from eagle_assets.eagle3_eval.greedy_outputs import OUTPUTS_SCHEMA, greedy_outputs
from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters
from eagle_assets.eagle3_eval.numbers import Evaluation, acceptance_table
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.eagle3_eval.served import ServedRun
from eagle_assets.eagle3_eval.suite_sets import SuiteSet
from eagle_assets.reasoning_samples.requests import PromptRequest


def served(prompt_ids: list[str], drafts: float, accepted_per_pos: tuple[float, ...], failed: int = 0) -> ServedRun:
    rows = [
        {"status": "ok", "prompt_id": p, "prompt_token_ids": [1, 2], "token_ids": [3, 4, 5], "finish_reason": "stop"}
        for p in prompt_ids
    ] + [{"status": "error", "prompt_id": f"bad{i}", "error": "boom"} for i in range(failed)]
    counters = SpecDecodeCounters(
        drafts=drafts, accepted=sum(accepted_per_pos), accepted_per_pos=accepted_per_pos, spec_decode_enabled=True
    )
    return ServedRun(counters, rows, wall_s=2.0, server_model="verifier", vllm_version="0.0-test")


def requests(*prompt_ids: str) -> list[PromptRequest]:
    return [PromptRequest(p, [{"role": "user", "content": p}], "heldout", None) for p in prompt_ids]


def a_plan(tmp_path: Path, ood_partitions: list[str]) -> EvalPlan:
    heldout = EvalSet("in-distribution", ["demo"], requests("a", "b"), excluded_trained=2)
    ood = EvalSet("out-of-distribution", ood_partitions, requests("o1") if ood_partitions else [], 0)
    return EvalPlan(tmp_path / "eagle3_checkpoint" / "0123abcd", ["demo"], heldout, ood)


def test_the_report_holds_each_sets_numbers_under_its_label(tmp_path):
    plan = a_plan(tmp_path, ["demo_ood"])
    evaluation = Evaluation(
        served(["a", "b"], 10, (8, 6, 4), failed=1), None, None, 3, ood=served(["o1"], 5, (2, 1, 0))
    )
    report = build_report(
        plan, evaluation, tmp_path / "out", training_run="v1", config={"max_prompts": 2}, dagster_run_id="r1"
    )
    numbers = report.numbers
    assert numbers["heldout[demo]/acceptance_length"] == 2.8 and numbers["ood[demo_ood]/acceptance_length"] == 1.6
    assert numbers["heldout[demo]/acceptance_pos_1"] == 0.8 and numbers["ood[demo_ood]/acceptance_pos_3"] == 0.0
    assert numbers["heldout[demo]/prompts_evaluated"] == 2 and numbers["heldout[demo]/prompt_errors"] == 1
    assert numbers["heldout[demo]/excluded_trained"] == 2 and numbers["ood[demo_ood]/excluded_trained"] == 0
    assert numbers["num_speculative_tokens"] == 3 and "heldout[demo]/simulated_acceptance_length" not in numbers
    assert report.labels == ["heldout[demo]", "ood[demo_ood]"]
    # Without recorded suites (a plan from before them) the sets are the held-out and out-of-distribution ones,
    # their versions unknown; rows without per-request statistics give no per-request numbers.
    assert [(s["label"], s["name"], s["version"]) for s in report.report["suites"]] == [
        ("heldout[demo]", "heldout", "?"),
        ("ood[demo_ood]", "ood", "?"),
    ]
    assert numbers["heldout[demo]/requests_with_metrics"] == 0 and report.report["per_request"] == {}
    assert {k: v for k, v in report.report.items() if k not in ("suites", "per_request")} == {
        "training_run": "v1",
        "eval_sets": report.labels,
        "checkpoint": str(plan.checkpoint),
        "partitions": ["demo"],
        "prompt_ids": ["a", "b"],
        "ood_partitions": ["demo_ood"],
        "ood_prompt_ids": ["o1"],
        "config": {"max_prompts": 2},
        "server_model": "verifier",
        "vllm_version": "0.0-test",
        "dagster_run_id": "r1",
        "measurement_key": None,  # no key given: a report no later evaluation reuses
        **numbers,
        "data_version": report.data_version,
    }
    table = acceptance_table(numbers, report.labels).splitlines()
    assert table[2] == "| heldout[demo] | 2 | 2.800 | 0.800 / 0.600 / 0.400 | — | — |"
    suites = json.dumps([["heldout", "?"], ["ood", "?"]])
    assert report.data_version == combined_hash(["0123abcd", suites, json.dumps(numbers, sort_keys=True)])[:16]


def test_a_suites_version_is_part_of_the_data_version(tmp_path):
    """The same checkpoint measuring the same numbers on a suite of another version is another data version."""
    evaluation = Evaluation(served(["a", "b"], 10, (8, 6, 4)), None, None, 3)

    def data_version(heldout_version: str) -> str:
        plan = a_plan(tmp_path, [])
        heldout = SuiteSet("heldout[demo]", "heldout", heldout_version, "demo", plan.heldout.requests)
        report = build_report(
            replace(plan, suites=(heldout,)), evaluation, tmp_path, training_run="v1", config={}, dagster_run_id="r"
        )
        assert report.report["suites"][0]["version"] == heldout_version  # what `eagle-assets checkpoints` reads
        return report.data_version

    assert data_version("demo@v1") == data_version("demo@v1")
    assert data_version("demo@v2") != data_version("demo@v1")


def test_without_an_ood_set_only_the_variants_join_the_labels(tmp_path):
    plan = a_plan(tmp_path, [])
    evaluation = Evaluation(served(["a", "b"], 4, (2,)), None, None, 1, by_variant={"think": served(["a"], 2, (1,))})
    report = build_report(plan, evaluation, tmp_path / "out", training_run="v1", config={}, dagster_run_id="r")
    assert report.labels == ["heldout[demo]", "heldout[demo]/variant[think]"]
    assert report.numbers["heldout[demo]/variant[think]/acceptance_length"] == 1.5
    assert not any(key.startswith("ood") for key in report.numbers) and report.report["ood_partitions"] == []


def test_the_report_and_the_greedy_outputs_are_written_beside_each_other(tmp_path):
    plan = a_plan(tmp_path, ["demo_ood"])
    evaluation = Evaluation(
        served(["a", "b"], 10, (8, 6, 4), failed=1), None, None, 3, ood=served(["o1"], 5, (2, 1, 0))
    )
    report = build_report(
        plan, evaluation, tmp_path / "out" / "0123abcd", training_run="v1", config={}, dagster_run_id="r"
    )
    write_report(report, greedy_outputs(plan, evaluation))
    assert report.report_file == tmp_path / "out" / "0123abcd" / "report.json"
    assert json.loads(report.report_file.read_text()) == report.report
    outputs = pq.read_table(report.greedy_outputs_file)
    assert outputs.schema == OUTPUTS_SCHEMA
    assert [(r["eval_set"], r["prompt_id"]) for r in outputs.to_pylist()] == [
        ("in-distribution", "a"),
        ("in-distribution", "b"),
        ("out-of-distribution", "o1"),
    ]  # failed requests are not outputs
    assert outputs.to_pylist()[0]["token_ids"] == [3, 4, 5]
