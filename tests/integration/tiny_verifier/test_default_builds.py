"""The default builds of the embedded tiny verifiers (the unit tier uses quick builds of the same recipes):
what training taught tiny-qwen3, the cache's reuse of the default build, and the embedded resources that
serve and read tiny-kimi's default build."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from eagle_assets.resources.embedded import embedded_resources
from eagle_assets.tiny_verifier.arithmetic import Problem, worked_solution
from eagle_assets.tiny_verifier.cache import cached_tiny_verifier
from eagle_assets.tiny_verifier.corpus import make_conversations
from eagle_assets.tiny_verifier.recipe import DEFAULT_RECIPE, recipe_hash


@pytest.fixture(scope="module")
def tokenizer(tiny_verifier):
    return AutoTokenizer.from_pretrained(tiny_verifier)


def _held_out_problem() -> Problem:
    """A problem whose question never occurs in the training conversations."""
    trained = {
        conv.messages[-1]["content"]
        for conv in make_conversations(
            DEFAULT_RECIPE.train_steps * DEFAULT_RECIPE.batch_size, DEFAULT_RECIPE.seed + 2, DEFAULT_RECIPE
        )
    }
    problem = Problem(468, "+", 275, "What is 468 + 275?")
    assert problem.question not in trained
    return problem


def test_model_writes_thinking_then_answer(tiny_verifier, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_verifier).eval()
    assert "lm_head.weight" in model.state_dict() and "model.embed_tokens.weight" in model.state_dict()
    problem = _held_out_problem()
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": problem.question}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**inputs, max_new_tokens=200, do_sample=False)
    completion = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :])
    thinking, _answer = worked_solution(problem)
    assert completion.startswith(thinking.split("\n")[0])  # the worked style's first line
    assert "\n</think>\n\nThe answer is " in completion
    assert completion.endswith("<|im_end|>")


def test_second_call_reuses_the_cache(tiny_verifier):
    lines: list[str] = []
    again = cached_tiny_verifier(log=lines.append)
    assert again == tiny_verifier
    assert lines == []  # nothing was built
    assert again.name == recipe_hash(DEFAULT_RECIPE)


def test_embedded_resources_select_tiny_kimi_consistently(tiny_kimi):
    resources = embedded_resources("tiny-kimi", port=8999)
    verifier, server = resources["verifier"], resources["vllm_server"]
    assert verifier.resolved_model_path() == tiny_kimi and verifier.backend == "kimi"
    argv = server.command(server.resolved_model())
    assert argv[argv.index("--model") + 1] == str(tiny_kimi)
    assert argv[argv.index("--reasoning-parser") + 1] == "kimi_k2"
    assert json.loads(argv[argv.index("--limit-mm-per-prompt") + 1]) == {"vision_chunk": 0}
    with pytest.raises(ValueError, match="tiny-qwen3, tiny-kimi"):
        embedded_resources("tiny-llama")
