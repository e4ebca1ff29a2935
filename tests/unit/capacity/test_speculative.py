"""The expected speed-up of speculative decoding: τ over the step's cost in verifier decode steps."""

from __future__ import annotations

import pytest

from eagle_assets.capacity.speculative import expected_speedup


def test_speedup_is_tau_over_the_cost_of_one_speculative_step():
    # A draft of negligible cost and free verification gives τ itself.
    assert expected_speedup(3.0, 3, draft_cost_ratio=1e-9) == pytest.approx(3.0)
    # Kimi-shaped: τ 3 at K 3, a draft step 3 % of a verifier step, verification of 4 positions 20 % dearer.
    assert expected_speedup(3.0, 3, 0.03, 1.2) == pytest.approx(3.0 / (1.2 + 0.09))
    # The embedded verifiers on CPU: the draft costs what the verifier does, so it slows decoding down.
    assert expected_speedup(2.0, 3, 1.0) == pytest.approx(0.5)
    # More tokens proposed cost more draft steps: at the same τ, a larger K is slower.
    assert expected_speedup(2.5, 4, 0.05) < expected_speedup(2.5, 3, 0.05)


@pytest.mark.parametrize(
    ("tau", "k", "draft", "verify", "message"),
    [
        (0.9, 3, 0.1, 1.0, "outside 1..K\\+1"),
        (4.5, 3, 0.1, 1.0, "outside 1..K\\+1"),
        (2.0, 0, 0.1, 1.0, "num_speculative_tokens must be >= 1"),
        (2.0, 3, 0.0, 1.0, "must be > 0"),
        (2.0, 3, 0.1, -1.0, "must be > 0"),
    ],
)
def test_impossible_inputs_are_refused(tau, k, draft, verify, message):
    with pytest.raises(ValueError, match=message):
        expected_speedup(tau, k, draft, verify)
