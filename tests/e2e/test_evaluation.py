"""Acceptance measured by vLLM, on the demo's instance with a second training run beside the demo's: the
τ convention, the simulated value tracking the served one, per-request statistics agreeing with the server's
counters on every suite (an MT-Bench-shaped one included) and a K sweep, held-out prompts never trained on,
two runs listed side by side, a run's checkpoint refused by another run, a recipe fixed by the run's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.demo import MT_BENCH_ROWS, SECOND_RECIPE, SECOND_RUN

# Two named training runs with different recipes on the same data: the demo's own (its recipe, 5 epochs), and
# a second one trained beside it on the demo's data for a single epoch (the default accuracy floor; one
# epoch over the demo partition's 641 rows passes it), evaluated on 12 prompts per set (tests/helpers/demo.py).
RECIPES = {"demo": {"epochs": 5}, SECOND_RUN: SECOND_RECIPE}
HELDOUT, OOD = "heldout[demo]", "ood[demo_ood]"
# The prompt sets each run's evaluation measured: the demo's the default ones, the second run's an MT-Bench-shaped
# suite too (tests/helpers/demo.py).
SETS = {"demo": [HELDOUT, OOD], SECOND_RUN: [HELDOUT, OOD, "mt_bench"]}


def _metadata(materialization) -> dict:
    return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}


@pytest.fixture(scope="module")
def evaluated(demo, second_training_run, second_run_evaluation):
    """The demo's instance and storage root (tests/e2e/conftest.py) with a second training run beside the
    demo's: RECIPES' second recipe trained on the demo's data, then ``eagle3_eval`` of it (its own
    speculating server, on the port after the demo's), run in a process of its own on the demo's
    resources once the demo ended (tests/conftest.py starts it in the background) and recorded in the
    demo's instance ($DAGSTER_HOME, as the CLI reads it). Yields a dict: that evaluation's ``meta`` and
    ``checks``, ``runs`` (run -> (checkpoint metadata, evaluation metadata), the demo's run first),
    ``root``, ``instance``, ``defs``, ``resources``."""
    import dagster as dg

    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.eagle3_eval import asset as eagle3_eval
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.resources import StorageRoot
    from eagle_assets.resources.embedded import embedded_resources

    outcome = {"trained": second_training_run.value(), "evaluated": second_run_evaluation.value()}
    assert outcome["trained"]["success"]
    assert outcome["evaluated"]["success"]
    built = [family.build(source_partitions()) for family in (eagle3_checkpoint, eagle3_eval)]
    defs = [d for b in built for d in (*b["assets"], *b.get("checks", []))]
    resources = {"storage": StorageRoot(root=str(demo.root)), **embedded_resources(demo.verifier, port=demo.port)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(demo.home))
        with dg.DagsterInstance.get() as instance:

            def latest(asset: str, partition: str):
                records = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
                ).records
                return records[0].asset_materialization if records else None

            # The demo materialized what both runs train on, and the out-of-distribution set (an
            # evaluation-only source's prompts, all heldout).
            assert all(
                latest(asset, "demo") for asset in ("prompts", "reasoning_samples", "token_sequences", "hidden_states")
            )
            assert latest("prompts", "demo_ood")
            runs = {
                run: (_metadata(latest("eagle3_checkpoint", run)), _metadata(latest("eagle3_eval", run)))
                for run in RECIPES
            }
            evaluations = instance.all_logs(
                outcome["evaluated"]["run_id"], of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
            )
            checks = {c.check_name: c for c in (e.dagster_event.event_specific_data for e in evaluations)}
            yield {
                "meta": runs[SECOND_RUN][1],
                "checks": checks,
                "runs": runs,
                "root": demo.root,
                "instance": instance,
                "defs": defs,
                "resources": resources,
            }


def test_eval_measures_acceptance_with_vllm(evaluated):
    import json

    meta, checks = evaluated["meta"], evaluated["checks"]
    k = meta["num_speculative_tokens"]
    # Each prompt set's numbers under its own label: a plot of one key never mixes prompt sets.
    assert meta["eval_set"] == HELDOUT and meta["ood_eval_set"] == OOD
    held = {key.removeprefix(f"{HELDOUT}/"): v for key, v in meta.items() if key.startswith(f"{HELDOUT}/")}
    ood = {key.removeprefix(f"{OOD}/"): v for key, v in meta.items() if key.startswith(f"{OOD}/")}
    assert k == 3 and held["prompts_evaluated"] == 12 and held["prompt_errors"] == 0
    assert held["drafts"] > 0 and held["completion_tokens"] > 0
    # vLLM's counters, vLLM's convention: τ = 1 + accepted/drafts, per position non-increasing.
    assert held["acceptance_length"] == pytest.approx(1 + held["accepted_tokens"] / held["drafts"], abs=1e-3)
    rates = [held[f"acceptance_pos_{i}"] for i in range(1, k + 1)]
    assert rates == sorted(rates, reverse=True)
    assert held["acceptance_length"] == pytest.approx(1 + sum(rates), abs=1e-3)
    # A trained draft is accepted at all (an untrained one sits at τ ≈ 1).
    assert held["acceptance_length"] > 1.2
    # The simulated value of the same draft on the same greedy outputs tracks the served one.
    assert held["simulated_acceptance_length"] == pytest.approx(held["acceptance_length"], abs=0.35)
    assert checks["acceptance_length_above_floor"].passed
    report = json.loads(Path(meta["report"]).read_text())
    assert report[f"{HELDOUT}/acceptance_length"] == held["acceptance_length"] and len(report["prompt_ids"]) == 12
    # The out-of-distribution set, measured apart on the same speculating server, same convention.
    assert meta["ood_partitions"] == "demo_ood" and ood["prompts_evaluated"] == 12
    assert ood["drafts"] > 0 and "simulated_acceptance_length" not in ood
    assert ood["acceptance_length"] == pytest.approx(1 + ood["accepted_tokens"] / ood["drafts"], abs=1e-3)
    assert len(report["ood_prompt_ids"]) == 12 and not set(report["ood_prompt_ids"]) & set(report["prompt_ids"])
    assert f"| {OOD} | 12 | {ood['acceptance_length']:.3f} |" in meta["acceptance"]


def test_eval_per_request_agrees_with_the_counters_on_every_suite(evaluated):
    """The second run's evaluation with per-request metrics on: per set, the responses' verify steps and accepted
    tokens are the server's counters' (τ within 1 %), the position bins and thinking/answer hold every step
    once; MT-Bench's two turns asked in order; the suite's version, the plot, the tables; and the K sweep."""
    import json

    import pyarrow.parquet as pq

    meta, checks = evaluated["meta"], evaluated["checks"]
    assert checks["per_request_matches_counters"].passed, checks["per_request_matches_counters"].description
    rows = pq.read_table(meta["requests"]).to_pylist()
    for label in SETS[SECOND_RUN]:
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
    assert meta[f"{HELDOUT}/tau_per_request"] > 1.5
    # MT-Bench: both turns of each question, the second after the first.
    turns = sorted((r["prompt_id"], r["turn"]) for r in rows if r["suite"] == "mt_bench")
    assert turns == [(str(r["question_id"]), t) for r in MT_BENCH_ROWS for t in (0, 1)]
    report = json.loads(Path(meta["report"]).read_text())
    mt = next(s for s in report["suites"] if s["name"] == "mt_bench")
    assert mt["version"].startswith("1+") and mt["prompts"] == 4
    written = (Path(mt["location"]) / "question.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in written] == MT_BENCH_ROWS  # the location the evaluation was given
    assert set(report["per_request"]["mt_bench"]["categories"]) == {"math", "reasoning"}
    assert Path(meta["tau_along_trace_plot"]).read_bytes()[:4] == b"\x89PNG"
    assert "| mt_bench | mt_bench |" in meta["suites"] and "| all |" in meta["mt_bench/per_request"]
    # The sweep: both Ks on the same held-out prompts, and without the draft.
    assert meta["sweep/best_num_speculative_tokens"] in (2, 3) and meta["sweep/prompts"] == 6
    assert meta["sweep/tokens_per_s_without_draft"] > 0
    assert 1.0 <= meta["sweep/k2/acceptance_length"] <= 3.0 and 1.0 <= meta["sweep/k3/acceptance_length"] <= 4.0
    assert "(best)" in meta["sweep"]


def test_two_training_runs_live_side_by_side(evaluated):
    """Two recipes materialized one after the other: each run has its own checkpoint and evaluation, and
    `eagle-assets checkpoints` lists both with τ per prompt set and lineage ok. A run evaluates only its
    own checkpoints, and re-materializing a run with another recipe is refused."""
    import dagster as dg
    from typer.testing import CliRunner

    from eagle_assets.cli import app

    runs, root, instance = evaluated["runs"], evaluated["root"], evaluated["instance"]
    folders = {run: Path(checkpoint["path"]) for run, (checkpoint, _) in runs.items()}
    assert set(runs) == set(RECIPES) and len(set(folders.values())) == 2
    for run, (checkpoint, evaluation) in runs.items():
        assert checkpoint["training_run"] == run and checkpoint["recipe"]["epochs"] == RECIPES[run]["epochs"]
        assert checkpoint["epochs_run"] == RECIPES[run]["epochs"]
        assert evaluation["training_run"] == run and evaluation["checkpoint"] == str(folders[run])
        assert "| prompts | demo |" in checkpoint["lineage"] and "](/runs/" in checkpoint["lineage"]

    listed = CliRunner().invoke(app, ["checkpoints", "--root", str(root)])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    for run, (_, evaluation) in runs.items():
        at = lines.index(next(line for line in lines if line.startswith(f"{folders[run].name}  run {run}  ")))
        block = lines[at : at + 5]
        assert block[1] == f"  recipe: epochs={RECIPES[run]['epochs']}, lr=0.003", block
        assert block[2].startswith("  data: prompts[demo] ") and "hidden_states[demo] " in block[2]
        assert block[3] == "  tau: " + ", ".join(
            f"{label} {evaluation[f'{label}/acceptance_length']:.3f}" for label in sorted(SETS[run])
        )
        assert block[4] == "  lineage: ok", listed.output

    first, second = RECIPES
    # The other run's checkpoint is refused by name, before any server starts.
    other = dg.materialize(
        evaluated["defs"],
        selection=dg.AssetSelection.assets("eagle3_eval"),
        instance=instance,
        resources=evaluated["resources"],
        partition_key=second,
        raise_on_error=False,
        run_config={"ops": {"eagle3_eval": {"config": {"checkpoint": folders[first].name}}}},
    )
    [failure] = other.get_step_failure_events()
    assert f"belongs to training run {first!r}, not {second!r}" in failure.step_failure_data.error.message
    # A run name stands for one recipe.
    changed = dg.materialize(
        evaluated["defs"],
        selection=["eagle3_checkpoint"],
        instance=instance,
        resources=evaluated["resources"],
        partition_key=second,
        raise_on_error=False,
        run_config={"ops": {"eagle3_checkpoint": {"config": {**runs[second][0]["recipe"], "epochs": 5}}}},
    )
    assert not changed.get_asset_materialization_events()
    [failure] = changed.get_step_failure_events()
    assert f"epochs: {RECIPES[second]['epochs']} -> 5" in failure.step_failure_data.error.message


def test_the_checkpoint_page_shows_both_training_runs(evaluated, tmp_path):
    """The UI over the same instance: `eagle3_checkpoint`'s partitions are the two training runs, each
    showing its own checkpoint folder as its latest materialization. Reuses the trained runs (the UI adds
    only its own start, about half a minute)."""
    from eagle_assets.core.partitions import TRAINING_RUNS
    from tests.helpers.browser import STEP_TIMEOUT_MS, browser_page, playwright_api
    from tests.helpers.dagster_ui import serve_ui

    expect = playwright_api().expect
    home = Path(evaluated["instance"].root_directory)
    with serve_ui(home, evaluated["root"]) as url, browser_page() as page:
        page.goto(f"{url}/assets/eagle3_checkpoint?view=partitions")
        # Every training run the instance knows (the tiny-kimi demo in the same home adds its own), and
        # not "Materialized (n)": a run's refused re-materialization (the recipe test) shows it as Failed.
        known = evaluated["instance"].get_dynamic_partitions(TRAINING_RUNS)
        assert set(RECIPES) <= set(known)
        expect(page.get_by_text(f"{len(known)} Partitions Selected")).to_be_visible(timeout=STEP_TIMEOUT_MS)
        for at, (run, (checkpoint, _)) in enumerate(evaluated["runs"].items()):
            page.get_by_text(run, exact=True).first.click()
            expect(page.get_by_text(Path(checkpoint["path"]).name).first).to_be_visible(timeout=STEP_TIMEOUT_MS)
            page.screenshot(path=tmp_path / f"{at}-{run}.png")


def test_eval_prompts_are_heldout_and_never_trained_on(evaluated):
    import json

    import pyarrow.parquet as pq

    from eagle_assets.core.layout import prompts_file

    meta, root = evaluated["meta"], evaluated["root"]
    report = json.loads(Path(meta["report"]).read_text())
    prompts = {r["prompt_id"]: r for r in pq.read_table(prompts_file(root, "demo")).to_pylist()}
    assert {prompts[p]["split"] for p in report["prompt_ids"]} == {"heldout"}
    # The rows the checkpoint trained and validated on (its training folder): no evaluated prompt, and
    # no evaluated problem, is among them.
    training = json.loads((Path(report["checkpoint"]) / "training.json").read_text())
    rows = pq.read_table(Path(training["data"]["folder"]) / "rows.parquet").to_pylist()
    assert {r["split"] for r in rows} == {"train", "validation"}
    evaluated_ids = set(report["prompt_ids"]) | set(report["ood_prompt_ids"])
    assert not {r["prompt_id"] for r in rows} & evaluated_ids
    assert not {r["group_id"] for r in rows} & {prompts[p]["group_id"] for p in report["prompt_ids"]}
    assert meta[f"{HELDOUT}/excluded_trained"] == 0  # nothing was re-split after training here
