"""Which suites one eagle3_eval measures (names, locations, bad rows, a suite with nothing usable), the
speculating server's per-request flags, and the K sweep on scripted runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.eagle3_eval.asset import Eagle3EvalConfig
from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters
from eagle_assets.eagle3_eval.served import ServedRun
from eagle_assets.eagle3_eval.suite_sets import (
    DEFAULT_SUITES,
    SuiteError,
    check_suite_names,
    registered_set,
    registered_sets,
    request_of,
)
from eagle_assets.reasoning_samples.requests import PromptRequest
from eagle_assets.reasoning_samples.turns import Conversation
from eagle_assets.sources import SkippedRow
from eagle_assets.suites import EvalSuite, SuitePrompt, SuiteUnavailable
from tests.helpers.logs import Levels


class Listed(EvalSuite):
    """A suite of the rows it is given."""

    def __init__(self, rows, **kw):
        super().__init__(**{"name": "listed", "description": "d", "category": "chat", **kw})
        self.rows = rows

    def prompts(self, location=None):
        if location == "gone":
            raise SuiteUnavailable("eval suite 'listed': 'gone' does not exist. Set eagle3_eval's suite_locations")
        yield from self.rows

    def resolved_version(self, location=None):
        return f"{self.version}+data"


def test_an_evaluation_measures_the_held_out_and_the_out_of_distribution_set_by_default():
    assert DEFAULT_SUITES == ("heldout", "ood")
    assert Eagle3EvalConfig().suites == ["heldout", "ood"]


def test_suite_names_are_checked_before_anything_is_sent():
    registered = {"gsm8k": Listed([])}
    check_suite_names(["heldout", "ood", "gsm8k"], registered)
    with pytest.raises(SuiteError, match=r"unknown eval suites \['mtbench'\]: the suites are heldout, ood, gsm8k"):
        check_suite_names(["heldout", "mtbench"], registered)
    with pytest.raises(SuiteError, match=r"\['gsm8k'\] are listed more than once"):
        check_suite_names(["heldout", "gsm8k", "gsm8k"], registered)
    with pytest.raises(SuiteError, match="leave out 'heldout': the held-out τ is what the acceptance floor checks"):
        check_suite_names(["gsm8k"], registered)
    with pytest.raises(SuiteError, match=r"suite_locations names suites \['aime'\] that `suites` does not list"):
        registered_sets(["heldout"], registered, {"aime": "/data/aime"}, 8, Levels())


def test_a_registered_suite_keeps_its_first_prompts_counts_its_bad_rows_and_records_its_version():
    rows = [
        SuitePrompt("1", ("a?",), "math"),
        SkippedRow("q.jsonl#1", "no 'question' field", "missing_field"),
        SuitePrompt("1", ("again?",), "math"),
        SuitePrompt("2", ("b?", "c?"), "writing"),
        SuitePrompt("3", ("d?",), "math"),
    ]
    log = Levels()
    chosen = registered_set(Listed(rows), None, 2, log)
    assert [item.prompt_id for item in chosen.items] == ["1", "2"]
    assert isinstance(chosen.items[0], PromptRequest) and isinstance(chosen.items[1], Conversation)
    assert chosen.items[1].turns_left == 2 and chosen.category_of("2") == "writing"
    assert chosen.skipped == {"missing_field": 1, "duplicate_id": 1}
    assert chosen.record() == {
        "label": "listed",
        "name": "listed",
        "version": "1+data",
        "category": "chat",
        "location": None,
        "prompts": 2,
        "skipped": {"missing_field": 1, "duplicate_id": 1},
    }
    assert log.warnings[0] == "eval suite listed: 1 rows skipped (missing_field), e.g. q.jsonl#1: no 'question' field"


def test_a_suite_that_cannot_be_read_or_has_nothing_usable_names_what_to_set():
    with pytest.raises(SuiteError, match=r"'gone' does not exist\. Set eagle3_eval's suite_locations"):
        registered_set(Listed([]), "gone", 8, Levels())
    bad = [SkippedRow("t.jsonl#0", "'question' is empty", "empty_text")]
    with pytest.raises(SuiteError, match=r"has no usable prompt \(skipped: \{'empty_text': 1\}\); point eagle3_eval"):
        registered_set(Listed(bad), "/data/t.jsonl", 8, Levels())
    assert isinstance(request_of(SuitePrompt("x", ("only",), "c")), PromptRequest)


def test_the_speculating_server_asks_for_per_request_statistics():
    from eagle_assets.eagle3_eval.evaluate import EvaluationError, speculative_server
    from eagle_assets.resources import VLLMServer

    argv = speculative_server(VLLMServer(model="/m"), Path("/ckpt/d"), 3, port=8001).command("/m")
    flag = argv.index("--per-request-spec-decode-metrics")
    assert argv[flag + 1] == "detailed" and "--enable-per-request-metrics" in argv
    own = VLLMServer(model="/m", extra_args=["--per-request-spec-decode-metrics", "summary"])
    assert speculative_server(own, Path("/ckpt/d"), 3).command("/m").count("--per-request-spec-decode-metrics") == 1
    with pytest.raises(EvaluationError, match=r"holds --disable-log-stats: .* remove it"):
        speculative_server(VLLMServer(model="/m", extra_args=["--disable-log-stats"]), Path("/ckpt/d"), 3)


def run(tokens_per_s: float, accepted_per_step: int, steps: int = 10) -> ServedRun:
    rows = [
        {
            "status": "ok",
            "prompt_id": f"p{i}",
            "token_ids": [1] * int(tokens_per_s),
            "spec_decoding": {"num_spec_steps": steps, "num_accepted_draft_tokens": accepted_per_step * steps},
        }
        for i in range(2)
    ]
    counters = SpecDecodeCounters(drafts=1.0, accepted=0.0, spec_decode_enabled=True)
    return ServedRun(counters, rows, wall_s=2.0, server_model="m", vllm_version="v")


def test_the_sweep_serves_each_k_and_once_without_the_draft_and_names_the_fastest():
    from eagle_assets.eagle3_eval.sweep import served_tau, sweep_num_speculative_tokens

    runs = {1: run(150, 1), 2: run(210, 2), 3: run(200, 3), None: run(100, 0)}
    asked, said = [], []

    def measure(k):
        asked.append(k)
        return runs[k]

    sweep = sweep_num_speculative_tokens([3, 1, 2, 3], measure, prompts=2, log=said.append)
    assert asked == [1, 2, 3, None]
    assert [(p.k, p.tau, p.tokens_per_s) for p in sweep.points] == [(1, 2.0, 150.0), (2, 3.0, 210.0), (3, 4.0, 200.0)]
    assert sweep.best.k == 2 and sweep.speedup(sweep.best) == pytest.approx(2.1)
    numbers = sweep.numbers()
    assert numbers["sweep/best_num_speculative_tokens"] == 2 and numbers["sweep/k3/acceptance_length"] == 4.0
    assert numbers["sweep/tokens_per_s_without_draft"] == 100.0 and numbers["sweep/k1/speedup"] == 1.5
    table = sweep.table().splitlines()
    assert table[0] == "Same 2 prompts per K; without the draft 100.0 tokens/s; best here: K=2"
    assert table[5] == "| 2 (best) | 3.000 | 210.0 | 2.100 |"
    assert said[-1] == "sweep without the draft: 100.0 tokens/s"
    # Without per-request statistics the counters' τ stands in.
    bare = run(100, 1)
    for row in bare.rows:
        row["spec_decoding"] = None
    assert served_tau(bare) == bare.counters.acceptance_length == 1.0
