"""One chat-completion response body (vLLM's OpenAI-compatible JSON) → the fields of a sample row.

vLLM reports the thinking as ``message.reasoning`` when it runs a reasoning parser; older servers
call it ``reasoning_content``; a server without a parser leaves ``<think>…</think>`` inline in
``content``. All three are read here so the rest of the pipeline sees one shape.

Where the thinking ends is taken from the token ids when the thinking markers' ids are known
(:func:`~eagle_assets.reasoning_samples.quality.thinking_span`); otherwise from the server's reasoning parser:
its ``reasoning_tokens`` count and its text split.
"""

from __future__ import annotations

from eagle_assets.reasoning_samples.quality import Thinking, ThinkMarkers, thinking_span

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class MalformedResponse(ValueError):
    """The server answered 2xx but the body is not a usable chat completion."""


def split_reasoning(message: dict) -> tuple[str | None, str | None]:
    """``(reasoning, content)`` of an assistant message, whichever way the server reported them."""
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    content = message.get("content")
    if reasoning is not None or content is None:
        return reasoning, content
    # No reasoning parser on the server: the thinking is inline.
    head, closed, tail = content.partition(THINK_CLOSE)
    if closed:
        return head.removeprefix(THINK_OPEN), tail
    if content.startswith(THINK_OPEN):
        return content.removeprefix(THINK_OPEN), None  # never closed: all of it is thinking
    return None, content


def _parser_thinking(reasoning: str | None, content: str | None, usage: dict) -> Thinking:
    """The thinking as the server's reasoning parser reports it (thinking markers unknown)."""
    counted = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    # No answer text after thinking: the parser never saw the end marker (or the answer is empty:
    # the text split cannot tell those apart, the token ids can).
    return Thinking(counted if reasoning else None, bool(reasoning) and not (content or "").strip())


def parse_completion(body: dict, markers: ThinkMarkers | None = None) -> dict:
    """The sample fields of a response body; raises :class:`MalformedResponse` with the reason.

    ``markers``: the verifier's thinking-marker ids, which place the end of the thinking exactly.
    """
    if not isinstance(body, dict):
        raise MalformedResponse(f"response body is {type(body).__name__}, not a JSON object")
    choices = body.get("choices")
    if not choices:
        raise MalformedResponse("server returned no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    reasoning, content = split_reasoning(message)
    finish_reason = choice.get("finish_reason")
    usage = body.get("usage") or {}
    token_ids = choice.get("token_ids")
    prompt_token_ids = body.get("prompt_token_ids")
    if markers is not None and token_ids is not None and prompt_token_ids is not None:
        thinking = thinking_span(prompt_token_ids, token_ids, markers)
    else:
        thinking = _parser_thinking(reasoning, content, usage)
    return {
        "reasoning": reasoning,
        "content": content,
        "finish_reason": finish_reason,
        "prompt_token_ids": prompt_token_ids,
        "token_ids": token_ids,
        "prompt_tokens": usage.get("prompt_tokens", len(prompt_token_ids or ())),
        "completion_tokens": usage.get("completion_tokens", len(token_ids or ())),
        "thinking_tokens": thinking.tokens,
        "truncated": finish_reason == "length",
        "unfinished_thinking": thinking.unfinished,
        "server_model": body.get("model"),
    }
