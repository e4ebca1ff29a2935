"""eagle3_eval against the session's real vLLM server, which speculates with no draft."""

from __future__ import annotations

import pytest


def test_eval_refuses_an_external_server_that_does_not_serve_the_checkpoint(
    vllm_server_config, vllm_server_urls, tmp_path
):
    """The session's server speculates with nothing: eagle3_eval's path refuses before sending a request,
    naming the fix. Its engine config (/server_info, dev mode on in the session server) says so."""
    from eagle_assets.eagle3_eval.evaluate import EvaluationError, evaluate, replaced
    from eagle_assets.eagle3_eval.served import served_speculative_config
    from eagle_assets.reasoning_samples.requests import PromptRequest

    assert served_speculative_config(vllm_server_urls[0]) is None
    external = replaced(vllm_server_config, mode="external", base_urls=list(vllm_server_urls))
    checkpoint = tmp_path / "0123456789abcdef"
    request = PromptRequest("p0", [{"role": "user", "content": "What is 2 + 3?"}], "heldout")
    with pytest.raises(EvaluationError, match="serves no speculative draft; start it with --speculative-config"):
        evaluate(checkpoint, [request], external, None)
