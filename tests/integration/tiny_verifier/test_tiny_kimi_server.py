"""tiny-kimi served by the real vLLM server: the kimi_k2 reasoning parser splits its thinking from its answer
at the exact tokens (the kimi backend's states of a served reply: tests/integration/hidden_states/
test_vllm_extraction.py)."""

from __future__ import annotations

import httpx
import pytest
from transformers import AutoTokenizer

QUESTION = [{"role": "user", "content": "What is 468 + 275?"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_kimi):
    return AutoTokenizer.from_pretrained(tiny_kimi)


def _chat(urls, model, **extra) -> dict:
    body = {
        "model": model,
        "messages": QUESTION,
        "max_tokens": 512,
        "temperature": 0.0,
        "return_token_ids": True,
        **extra,
    }
    response = httpx.post(f"{urls[0]}/chat/completions", json=body, timeout=300)
    response.raise_for_status()
    return response.json()


def test_kimi_parser_splits_thinking_from_the_answer_at_the_exact_tokens(
    kimi_server_urls, kimi_server_config, tokenizer
):
    assert kimi_server_config.reasoning_parser == "kimi_k2"
    reply = _chat(kimi_server_urls, kimi_server_config.resolved_model())
    choice = reply["choices"][0]
    message, completion = choice["message"], choice["token_ids"]
    assert choice["finish_reason"] == "stop"
    # The prompt is the chat template's rendering, ending in the opened thinking block.
    expected_prompt = tokenizer.apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert reply["prompt_token_ids"] == list(expected_prompt)
    think_start, think_end, im_end = tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<|im_end|>"])
    assert reply["prompt_token_ids"][-1] == think_start
    # Completion: thinking, one </think>, the answer, <|im_end|>; the parser cut exactly at </think>.
    assert completion.count(think_end) == 1 and completion[-1] == im_end
    cut = completion.index(think_end)
    assert tokenizer.decode(completion[:cut]) == message["reasoning"]
    assert tokenizer.decode(completion[cut + 1 : -1]) == message["content"]
    assert message["reasoning"].strip() and message["content"].strip()


def test_thinking_off_leaves_everything_to_the_answer(kimi_server_urls, kimi_server_config, tokenizer):
    reply = _chat(kimi_server_urls, kimi_server_config.resolved_model(), chat_template_kwargs={"thinking": False})
    choice = reply["choices"][0]
    think_start, think_end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert reply["prompt_token_ids"][-2:] == [think_start, think_end]
    assert think_end not in choice["token_ids"]
    assert not choice["message"]["reasoning"]
    assert tokenizer.decode(choice["token_ids"][:-1]) == choice["message"]["content"]
