"""Response parsing: where the reasoning is, truncation, unusable bodies."""

from __future__ import annotations

import pytest

from eagle_assets.reasoning_samples.parsing import MalformedResponse, parse_completion, split_reasoning


def body(message: dict, finish_reason: str = "stop", token_ids=(5, 6, 2)) -> dict:
    return {
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "token_ids": list(token_ids)}],
        "prompt_token_ids": [1, 2, 3, 4],
        "usage": {"prompt_tokens": 4, "completion_tokens": len(token_ids)},
    }


def test_reasoning_field_is_read_first():
    assert split_reasoning({"reasoning": "r", "reasoning_content": "old", "content": "a"}) == ("r", "a")


def test_reasoning_content_is_the_fallback_for_older_servers():
    assert split_reasoning({"reasoning_content": "old", "content": "a"}) == ("old", "a")


def test_inline_think_block_is_split_when_the_server_runs_no_parser():
    assert split_reasoning({"content": "<think>2+2 is 4</think>The answer is 4."}) == ("2+2 is 4", "The answer is 4.")
    # The chat template may open <think> itself, so the output only closes it.
    assert split_reasoning({"content": "2+2 is 4</think>4"}) == ("2+2 is 4", "4")


def test_unclosed_inline_think_block_is_all_reasoning():
    assert split_reasoning({"content": "<think>still going"}) == ("still going", None)
    assert split_reasoning({"content": "plain answer"}) == (None, "plain answer")


def test_parse_completion_flags_truncation_and_unfinished_thinking():
    row = parse_completion(body({"reasoning": "step 1, step 2", "content": None}, finish_reason="length"))
    assert row["truncated"] is True and row["unfinished_thinking"] is True
    assert row["token_ids"] == [5, 6, 2] and row["prompt_token_ids"] == [1, 2, 3, 4]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (4, 3)

    done = parse_completion(body({"reasoning": "think", "content": "42"}))
    assert done["truncated"] is False and done["unfinished_thinking"] is False
    assert (done["reasoning"], done["content"], done["finish_reason"]) == ("think", "42", "stop")


@pytest.mark.parametrize(
    "bad, reason",
    [({"choices": []}, "no choices"), ({"model": "x"}, "no choices"), (["not", "an", "object"], "not a JSON object")],
)
def test_parse_completion_rejects_unusable_bodies_with_the_reason(bad, reason):
    with pytest.raises(MalformedResponse, match=reason):
        parse_completion(bad)
