"""eagle3_eval's refusals and the speculating server it starts: which prompts are sent, a served run
without rows, an unreadable or a naming /server_info (a local HTTP server answers it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters
from tests.helpers.http import LocalServer, Reply
from tests.helpers.synthetic import publish_prompts


def test_speculative_server_adds_the_draft_and_keeps_every_other_setting():
    import json

    from eagle_assets.eagle3_eval.evaluate import EvaluationError, speculative_server
    from eagle_assets.resources import VLLMServer

    base = VLLMServer(
        model="/models/verifier",
        port=8000,
        max_model_len=4096,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=["--seed", "0"],
    )
    spec = speculative_server(base, Path("/ckpt/draft"), 3, port=8001)
    assert (spec.port, spec.model, spec.max_model_len, spec.env) == (8001, base.model, 4096, base.env)
    argv = spec.command(spec.model)
    flag = argv.index("--speculative-config")
    assert argv[flag - 2 : flag] == ["--seed", "0"]
    assert json.loads(argv[flag + 1]) == {"method": "eagle3", "model": "/ckpt/draft", "num_speculative_tokens": 3}
    with pytest.raises(EvaluationError, match="already holds --speculative-config"):
        speculative_server(spec, Path("/ckpt/other"), 3)


def test_the_simulated_acceptance_reads_the_verifier_through_its_configured_engine(tmp_path):
    """greedy_samples asks the backend with the resource's engine arguments (what the hidden_states asset
    passes), and hands each greedy sequence its states and prompt length."""
    from types import SimpleNamespace

    import torch

    from eagle_assets.eagle3_eval.evaluate import greedy_samples
    from eagle_assets.resources import Verifier

    asked = []

    class Recording:
        def extract(self, model_path, request, sink):
            asked.append((model_path, request))
            for key, ids in request.sequences:
                sink(SimpleNamespace(key=key, hidden_states=torch.full((len(ids), 2, 4), float(key))))

    class RecordingVerifier(Verifier):
        def get_backend(self):
            return Recording()

    (tmp_path / "config.json").write_text("{}")
    verifier = RecordingVerifier(model_path=str(tmp_path), engine_args={"gpu_memory_utilization": 0.5}, batch_tokens=64)
    rows = [{"prompt_token_ids": [1, 2], "token_ids": [3]}, {"prompt_token_ids": [4], "token_ids": [5, 6]}]
    samples = greedy_samples(rows, verifier, [1, 2])
    [(model_path, request)] = asked
    assert model_path == tmp_path and request.engine_args == {"gpu_memory_utilization": 0.5}
    assert (request.layer_ids, request.batch_tokens) == ([1, 2], 64)
    assert [s.token_ids for s in samples] == [[1, 2, 3], [4, 5, 6]]
    assert [s.completion_start for s in samples] == [2, 1]
    assert [float(s.hidden_states[0, 0, 0]) for s in samples] == [0.0, 1.0]


# ---------------------------------------------------------------------------- which prompts are sent
def test_no_heldout_prompt_left_is_a_clear_error_naming_the_fix(tmp_path):
    """Every held-out problem trained on (prompts re-split after training), or no heldout rows at all:
    eagle3_eval stops before starting a server, saying which and what to re-materialize."""
    from eagle_assets.eagle3_eval.eval_sets import EvalSetError, TrainedOn, heldout_set, require_prompts

    publish_prompts(tmp_path, "resplit", [("a", "heldout", "g1"), ("b", "heldout", "g2"), ("c", "train", "g3")])
    trained = TrainedOn(prompt_ids=frozenset({"c"}), group_ids=frozenset({"g1", "g2", "g3"}))
    chosen = heldout_set("in-distribution", tmp_path, ["resplit"], 64, trained)
    with pytest.raises(EvalSetError, match=r"left once the 2 whose problem .* re-materialize eagle3_checkpoint"):
        require_prompts(chosen)
    publish_prompts(tmp_path, "trainonly", [("d", "train", "g4"), ("e", "validation", "g5")])
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
    answer = {"status": 200, "body": b"{}"}
    with LocalServer(lambda request: Reply(answer["status"], answer["body"])) as server:
        answer["url"] = server.url
        yield answer


@pytest.mark.parametrize(
    "status, body, said",
    [(500, b"boom", "HTTP 500 Internal Server Error"), (404, b"", "HTTP 404 Not Found"), (200, b"<html>", "no JSON")],
)
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


def test_tau_per_prompt_set_leaves_out_each_sets_variants():
    """`eagle-assets checkpoints` shows one τ per evaluated prompt set; the per-variant τ of a set (sampling
    variants) is in the evaluation's metadata, not a set of its own."""
    from eagle_assets.eagle3_eval.numbers import tau_by_set

    metadata = {
        "heldout[demo]/acceptance_length": 3.5,
        "heldout[demo]/variant[instant]/acceptance_length": 3.4,
        "heldout[demo]/drafts": 10,
        "ood[demo_ood]/acceptance_length": 2.9,
    }
    assert tau_by_set(metadata) == {"heldout[demo]": 3.5, "ood[demo_ood]": 2.9}
