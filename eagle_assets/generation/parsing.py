"""One chat-completion response body (vLLM's OpenAI-compatible JSON) → the fields of a sample row.

vLLM reports the thinking as ``message.reasoning`` when it runs a reasoning parser; older servers
call it ``reasoning_content``; a server without a parser leaves ``<think>…</think>`` inline in
``content``. All three are read here so the rest of the pipeline sees one shape.
"""

from __future__ import annotations

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


def parse_completion(body: dict) -> dict:
    """The sample fields of a response body; raises :class:`MalformedResponse` with the reason."""
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
    return {
        "reasoning": reasoning,
        "content": content,
        "finish_reason": finish_reason,
        "prompt_token_ids": prompt_token_ids,
        "token_ids": token_ids,
        "prompt_tokens": usage.get("prompt_tokens", len(prompt_token_ids or ())),
        "completion_tokens": usage.get("completion_tokens", len(token_ids or ())),
        "truncated": finish_reason == "length",
        # The answer never left the thinking block: thinking but no answer text after it.
        "unfinished_thinking": bool(reasoning) and not (content or "").strip(),
        "server_model": body.get("model"),
    }
