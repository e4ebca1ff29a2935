"""Expected generation speed-up of speculative decoding with a draft, from its measured τ and K.

Cost model (the usual one for draft-then-verify decoding, as in Leviathan et al. 2023 and the EAGLE papers).
One speculative step of a sequence costs

    K draft forward passes, one after another, each ``draft_cost_ratio`` of a verifier decode step, and
    one verifier forward over the K + 1 positions, ``verify_cost_ratio`` of a verifier decode step,

and yields τ tokens on average: the accepted draft tokens plus the verifier's own next token, vLLM's
convention ``τ = 1 + accepted / drafts`` (what ``eagle3_eval`` measures). Decoding without the draft yields
one token per verifier step, so

    speed-up = τ / (verify_cost_ratio + K · draft_cost_ratio).

What the two ratios stand for, and where the model is optimistic:

* ``draft_cost_ratio``: one draft step over one verifier decode step, measured or estimated on the same
  hardware at the same batch. An EAGLE-3 draft is one decoder layer plus an LM head over its draft vocabulary;
  beside a 61-layer MoE verifier (Kimi-K2.5) it is a few percent. Beside the embedded tiny verifiers on CPU it is
  about 1 (the draft is as large as the verifier and per-step overhead dominates both), so no speed-up is
  expected there: speed-up < 1 is the model's answer, and what is measured.
* ``verify_cost_ratio``: a verifier step over K + 1 positions per sequence against one over one position.
  Decoding at small batch reads the weights once either way (memory bound): 1. At many sequences in flight
  (~200 for a regeneration) the step holds (K + 1) times the tokens and moves toward compute bound, so the
  ratio grows above 1; measure it (eagle3_eval's sweep gives tokens/s per K and without the draft) rather than
  assume 1.
* Rejected draft tokens still cost their share; τ already counts only accepted ones. Scheduling, sampling and
  the draft's KV cache are left out: the figure is an upper bound for a given τ.
"""

from __future__ import annotations


def expected_speedup(
    tau: float, num_speculative_tokens: int, draft_cost_ratio: float, verify_cost_ratio: float = 1.0
) -> float:
    """Decoding tokens/s with the draft over tokens/s without it (module docstring: the cost model).

    ``tau``: the draft's measured acceptance length at ``num_speculative_tokens`` (K), between 1 and K + 1;
    ``draft_cost_ratio``: one draft step / one verifier decode step (> 0); ``verify_cost_ratio``: one verify
    step over K + 1 positions / one verifier decode step (>= 1 in practice; > 0 accepted).
    """
    k = num_speculative_tokens
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be >= 1, got {k}")
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"tau {tau} is outside 1..K+1 = 1..{k + 1}: τ = 1 + accepted / drafts at K = {k}")
    if draft_cost_ratio <= 0 or verify_cost_ratio <= 0:
        raise ValueError(
            f"draft_cost_ratio ({draft_cost_ratio}) and verify_cost_ratio ({verify_cost_ratio}) must be > 0: "
            "they are step costs relative to one verifier decode step"
        )
    return tau / (verify_cost_ratio + k * draft_cost_ratio)
