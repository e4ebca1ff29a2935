"""Simulated acceptance: a real speculators draft's proposals scored against greedy outputs offline."""

from __future__ import annotations

import pytest

from tests.helpers.drafts import eagle3_draft


def _constant_draft():
    """A real speculators Eagle3DraftModel whose every proposal is draft token 0 = verifier token 2.

    The final norm's weight is zero, so all logits are 0 and argmax picks draft id 0; the draft
    vocabulary is verifier tokens [2, 3, 5, 7] (d2t holds the offsets).
    """
    import torch
    from transformers import Qwen3Config

    layer = Qwen3Config(
        vocab_size=8,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=32,
    )
    layer._attn_implementation = "sdpa"
    torch.manual_seed(0)
    draft = eagle3_draft(layer, 4, "Qwen3ForCausalLM")
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
