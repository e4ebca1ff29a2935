"""One evaluation of held-out, out-of-distribution and a registered two-turn suite against a scripted speculating
server (tests/unit/eagle3_eval/scripted.py): MT-Bench's second turn asked with the first answer, one
requests.parquet row per request, per-request τ equal to the counters' τ, each set's name and version in the
report, the tables and the plot in the metadata, and the cross-check failing when the counters count more."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_assets.eagle3_eval.acceptance import AcceptanceSettings, measure_acceptance
from eagle_assets.eagle3_eval.eval_sets import EvalSet
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.eagle3_eval.suite_sets import SuiteSet, request_of
from eagle_assets.reasoning_samples.requests import PromptRequest
from eagle_assets.resources import VLLMServer
from eagle_assets.suites import SuitePrompt
from tests.helpers.logs import Levels
from tests.unit.eagle3_eval.scripted import ScriptedVLLM


def requests(*prompt_ids: str) -> list[PromptRequest]:
    return [PromptRequest(p, [{"role": "user", "content": f"question {p}"}], "heldout", None) for p in prompt_ids]


def a_plan(checkpoint: Path) -> EvalPlan:
    heldout = EvalSet("in-distribution", ["demo"], requests("a", "b"))
    ood = EvalSet("out-of-distribution", ["demo_ood"], requests("o1"))
    mt = [SuitePrompt("81", ("Write a haiku.", "Now make it rhyme."), "writing"), SuitePrompt("82", ("2+2?",), "math")]
    suites = (
        SuiteSet("heldout[demo]", "heldout", "demo@v1", "demo", heldout.requests),
        SuiteSet("ood[demo_ood]", "ood", "demo_ood@v2", "demo_ood", ood.requests),
        SuiteSet(
            "mt_bench", "mt_bench", "1+abc", "chat", [request_of(p) for p in mt], {p.prompt_id: p.category for p in mt}
        ),
    )
    return EvalPlan(checkpoint, ["demo"], heldout, ood, suites)


@pytest.fixture(autouse=True)
def quick_settling(monkeypatch):
    """The scripted counters are settled as soon as they are read."""
    monkeypatch.setattr("eagle_assets.eagle3_eval.served.SETTLE_POLL_S", 0.01)


def measured(tmp_path: Path, server: ScriptedVLLM):
    checkpoint = tmp_path / "eagle3_checkpoint" / "0123abcd"
    log = Levels()
    report = measure_acceptance(
        a_plan(checkpoint),
        AcceptanceSettings(num_speculative_tokens=3, max_tokens=64, concurrency=2),
        VLLMServer(mode="external", base_urls=[server.url]),
        None,
        tmp_path / "eagle3_eval",
        log,
        training_run="v1",
        config={"suites": ["heldout", "ood", "mt_bench"]},
        dagster_run_id="r1",
    )
    return report, log


def test_every_set_is_measured_per_request_and_agrees_with_the_counters(tmp_path):
    import dagster as dg

    from eagle_assets.eagle3_eval.checks import counters_check_result
    from eagle_assets.eagle3_eval.result import materialize_result

    with ScriptedVLLM(str(tmp_path / "eagle3_checkpoint" / "0123abcd")) as server:
        report, log = measured(tmp_path, server)
        bodies = server.bodies
    # MT-Bench's second turn went after the first, with the verifier's own first answer in its context.
    second = next(b for b in bodies if b["messages"][-1]["content"] == "Now make it rhyme.")
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == "answer to Write a haiku."
    rows = pq.read_table(report.requests_file).to_pylist()
    assert [(r["suite"], r["prompt_id"], r["turn"]) for r in rows] == [
        ("heldout[demo]", "a", -1),
        ("heldout[demo]", "b", -1),
        ("ood[demo_ood]", "o1", -1),
        ("mt_bench", "81", 0),
        ("mt_bench", "81", 1),
        ("mt_bench", "82", -1),
    ]
    assert {r["category"] for r in rows if r["suite"] == "mt_bench"} == {"writing", "math"}
    assert all(r["answer_start"] and r["per_step_accepted"] and r["suite_version"] for r in rows)
    numbers = report.numbers
    for label in ("heldout[demo]", "ood[demo_ood]", "mt_bench"):
        assert numbers[f"{label}/tau_per_request"] == pytest.approx(numbers[f"{label}/acceptance_length"], abs=1e-4)
        assert numbers[f"{label}/tau_vs_counters"] == 0.0
        assert numbers[f"{label}/tau_ci_low"] <= numbers[f"{label}/tau_per_request"] <= numbers[f"{label}/tau_ci_high"]
    assert numbers["mt_bench/prompts_evaluated"] == 3  # requests: two turns and one
    stored = json.loads(report.report_file.read_text())
    assert [(s["label"], s["name"], s["version"], s["prompts"]) for s in stored["suites"]] == [
        ("heldout[demo]", "heldout", "demo@v1", 2),
        ("ood[demo_ood]", "ood", "demo_ood@v2", 1),
        ("mt_bench", "mt_bench", "1+abc", 2),
    ]
    assert set(stored["per_request"]["mt_bench"]["categories"]) == {"writing", "math"}
    assert report.labels == ["heldout[demo]", "ood[demo_ood]", "mt_bench"] and not log.warnings
    assert report.plot_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    meta = materialize_result(report, "v1", 2.0).metadata
    assert "| mt_bench | 3 |" in meta["acceptance"].value and "| mt_bench | mt_bench | 1+abc | chat | 2 |" in (
        meta["suites"].value
    )
    assert "| writing | 1 |" in meta["mt_bench/per_request"].value
    assert meta["tau_along_trace"].value.startswith("![τ along the output](data:image/png;base64,")
    assert meta["tau_along_trace_plot"].value == str(report.plot_file)
    assert meta["requests"].value == str(report.requests_file)
    values = {k: getattr(v, "value", v) for k, v in meta.items()}
    assert counters_check_result(values).passed
    assert counters_check_result(values).severity == dg.AssetCheckSeverity.WARN


def test_counters_that_count_more_than_the_requests_fail_the_cross_check(tmp_path):
    from eagle_assets.eagle3_eval.checks import counters_check_result

    with ScriptedVLLM(str(tmp_path / "eagle3_checkpoint" / "0123abcd"), phantom_drafts=1) as server:
        report, log = measured(tmp_path, server)
    assert report.disagreements and all(d > 0.01 for d in report.disagreements.values())
    assert "per-request τ and the server's counters differ by" in log.warnings[0]
    check = counters_check_result(report.numbers)
    assert not check.passed and "apart (more than 1%)" in check.description


def test_a_server_without_per_request_statistics_is_measured_by_its_counters_and_named(tmp_path):
    from eagle_assets.eagle3_eval.checks import counters_check_result

    with ScriptedVLLM(str(tmp_path / "eagle3_checkpoint" / "0123abcd"), per_request=False) as server:
        report, _ = measured(tmp_path, server)
    assert report.numbers["heldout[demo]/acceptance_length"] > 1.0
    assert report.numbers["heldout[demo]/requests_without_metrics"] == 2 and "tau_per_request" not in str(
        report.numbers
    )
    assert not report.plot_file.exists() and report.report["per_request"] == {}
    check = counters_check_result(report.numbers)
    assert not check.passed and "--per-request-spec-decode-metrics detailed" in check.description


def test_the_k_sweep_starts_a_server_per_k_and_reuses_the_evaluations_own(tmp_path):
    """A managed server: each K of the sweep is served apart (the evaluation's own K is its server), the
    held-out baseline and the sweep's run without the draft share one server; best K by tokens/s."""
    import contextlib

    from eagle_assets.eagle3_eval.evaluate import evaluate

    started = []

    class ScriptedServers(VLLMServer):
        @contextlib.contextmanager
        def serve(self, log=None):
            spec = next((json.loads(a) for a in self.extra_args if a.startswith("{")), None)
            k = spec["num_speculative_tokens"] if spec else 0
            started.append(k)
            with ScriptedVLLM(spec["model"] if spec else "", k=k) as server:
                yield [server.url]

    checkpoint = tmp_path / "0123abcd"
    evaluation = evaluate(
        checkpoint,
        requests("a", "b", "c"),
        ScriptedServers(model="/verifier", port=8000),
        None,
        num_speculative_tokens=3,
        max_tokens=32,
        measure_baseline=True,
        log=lambda line: None,
        sweep_ks=[1, 3, 2],
        sweep_requests=requests("a", "b"),
    )
    assert started == [3, 0, 1, 2]  # the evaluation's K, without the draft, then the other Ks
    sweep = evaluation.sweep
    assert [p.k for p in sweep.points] == [1, 2, 3] and sweep.prompts == 2
    assert all(p.requests == 2 and 1.0 <= p.tau <= p.k + 1 for p in sweep.points)
    assert sweep.best in sweep.points and sweep.tokens_per_s_without_draft > 0
    numbers = evaluation.metadata_by_set("heldout[demo]", "ood")
    assert numbers["sweep/best_num_speculative_tokens"] == sweep.best.k and "sweep/k2/acceptance_length" in numbers


def test_eagle_assets_checkpoints_shows_tau_per_suite_of_a_report(tmp_path):
    """`eagle-assets checkpoints` reads each kept checkpoint's latest report: τ per set on its line, and (--json)
    each set's suite name, version and per-request τ with its interval."""
    from eagle_assets.eagle3_eval.numbers import tau_by_set
    from eagle_assets.maintenance.checkpoints import CheckpointEntry, report_lines, suites_of

    with ScriptedVLLM(str(tmp_path / "eagle3_checkpoint" / "0123abcd")) as server:
        report, _ = measured(tmp_path, server)
    stored = json.loads(report.report_file.read_text())
    suites = suites_of(stored)
    assert list(suites) == ["heldout[demo]", "ood[demo_ood]", "mt_bench"]
    assert suites["mt_bench"]["name"] == "mt_bench" and suites["mt_bench"]["version"] == "1+abc"
    low, high = suites["mt_bench"]["tau_ci"]
    assert low <= suites["mt_bench"]["tau_per_request"] <= high
    entry = CheckpointEntry("0123abcd", "p", "v1", "now", {"epochs": 1, "lr": 0.003}, {}, tau_by_set(stored), "ok")
    tau_line = report_lines([entry])[3]
    tau = {label: report.numbers[f"{label}/acceptance_length"] for label in suites}
    assert tau_line == (
        f"  tau: heldout[demo] {tau['heldout[demo]']:.3f}, mt_bench {tau['mt_bench']:.3f}, "
        f"ood[demo_ood] {tau['ood[demo_ood]']:.3f}"
    )
