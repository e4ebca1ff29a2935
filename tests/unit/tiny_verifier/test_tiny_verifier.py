"""The embedded tiny verifier: tokenizer, chat template and the build cache (its trained behaviour and the
default build: tests/integration/tiny_verifier/test_default_builds.py; concurrent builds: test_cache.py)."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import AutoConfig, AutoTokenizer

from eagle_assets.tiny_verifier.recipe import DEFAULT_RECIPE, recipe_hash

# A recipe small enough to build in seconds: for the cache mechanics, not for its outputs.
QUICK_RECIPE = dataclasses.replace(DEFAULT_RECIPE, tokenizer_corpus_samples=200, train_steps=2, batch_size=4)


@pytest.fixture(scope="module")
def tokenizer(quick_tiny_verifier):
    return AutoTokenizer.from_pretrained(quick_tiny_verifier)


def test_tokenizer_round_trips_any_text(tokenizer):
    for text in ["What is 482 + 319?", "Ünïcödé, emoji 🙂, tabs\tand\nnewlines", "<think>\nx\n</think>\n\ny"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text


def test_digits_are_single_tokens(tokenizer):
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("1234567", add_special_tokens=False))
    assert pieces == list("1234567")


def test_think_tags_and_stop_token(tokenizer, quick_tiny_verifier):
    config = AutoConfig.from_pretrained(quick_tiny_verifier)
    assert tokenizer.eos_token == "<|im_end|>"
    assert config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    for tag in ("<think>", "</think>"):
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1
        # Kept when decoding with skip_special_tokens, so a reasoning parser sees them.
        assert tokenizer.decode(tokenizer.encode(tag, add_special_tokens=False), skip_special_tokens=True) == tag


def test_chat_template_renders_thinking(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "The answer is 5.", "reasoning_content": "2 + 3 = 5."},
        {"role": "user", "content": "And 4 + 4?"},
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    # An earlier turn keeps its answer only; the generation prompt opens the thinking block.
    assert "<|im_start|>assistant\nThe answer is 5.<|im_end|>\n" in prompt
    assert "2 + 3 = 5." not in prompt
    assert prompt.endswith("<|im_start|>user\nAnd 4 + 4?<|im_end|>\n<|im_start|>assistant\n<think>\n")

    no_think = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")

    # A final assistant turn (a training row) keeps its reasoning, from either field name or inline tags.
    for reply in (
        {"role": "assistant", "content": "The answer is 8.", "reasoning_content": "4 + 4 = 8."},
        {"role": "assistant", "content": "The answer is 8.", "reasoning": "4 + 4 = 8."},
        {"role": "assistant", "content": "<think>\n4 + 4 = 8.\n</think>\n\nThe answer is 8."},
    ):
        full = tokenizer.apply_chat_template([*messages, reply], tokenize=False)
        assert full == prompt + "4 + 4 = 8.\n</think>\n\nThe answer is 8.<|im_end|>\n"


def test_recipe_change_changes_the_key():
    assert recipe_hash(QUICK_RECIPE) != recipe_hash(DEFAULT_RECIPE)
    assert recipe_hash(dataclasses.replace(DEFAULT_RECIPE, seed=DEFAULT_RECIPE.seed + 1)) != recipe_hash()
