"""Sampling variants: a prompt's variant follows from its id alone, shares hold over many prompts, bad
variants are refused naming the field, and each request carries its variant's sampling."""

from __future__ import annotations

import json

import pytest

from eagle_assets.reasoning_samples.requests import PromptRequest, Sampling
from eagle_assets.reasoning_samples.variants import (
    SamplingVariant,
    VariantsError,
    assign_variant,
    read_variants,
    validate_variants,
)

THINKING = SamplingVariant("thinking", 0.75)
INSTANT = SamplingVariant("instant", 0.25, temperature=0.0, chat_template_kwargs={"enable_thinking": False})


def test_each_prompt_gets_one_variant_from_its_id_and_the_shares_hold():
    ids = [f"demo-{i:05d}" for i in range(4000)]
    first = [assign_variant(pid, [THINKING, INSTANT]).name for pid in ids]
    assert first == [assign_variant(pid, [THINKING, INSTANT]).name for pid in ids]  # a rerun agrees
    assert abs(first.count("instant") / len(ids) - 0.25) < 0.03
    assert assign_variant("demo-00001", []) is None


def test_a_variant_changes_only_what_it_names_and_names_itself_in_the_row_json():
    base = Sampling(temperature=0.6, top_p=0.95, max_tokens=512, chat_template_kwargs={"foo": 1})
    instant = INSTANT.sampling(base)
    assert (instant.temperature, instant.top_p, instant.max_tokens) == (0.0, 0.95, 512)
    assert instant.chat_template_kwargs == {"foo": 1, "enable_thinking": False}
    assert json.loads(instant.as_json())["variant"] == "instant"
    assert "variant" not in json.loads(base.as_json())  # rows without variants keep their JSON


@pytest.mark.parametrize(
    "variants, words",
    [
        ([SamplingVariant("a", 0.5)], "sum to 1"),
        ([SamplingVariant("a", 0.5), SamplingVariant("a", 0.5)], "own non-empty name"),
        ([SamplingVariant("a", 1.0), SamplingVariant("b", 0.0)], "must be > 0"),
    ],
)
def test_bad_variants_are_refused_naming_the_field_and_the_fix(variants, words):
    with pytest.raises(VariantsError, match="sampling_variants") as err:
        validate_variants(variants)
    assert words in str(err.value)


def test_the_launchpad_config_refuses_shares_that_do_not_sum_to_one():
    from pydantic import ValidationError

    from eagle_assets.reasoning_samples.asset import ReasoningSamplesConfig

    config = ReasoningSamplesConfig(
        sampling_variants=[
            {"name": "thinking", "share": 0.75},
            {"name": "instant", "share": 0.25, "chat_template_kwargs": {"enable_thinking": False}},
        ]
    )
    assert config.variants() == [
        THINKING,
        SamplingVariant("instant", 0.25, chat_template_kwargs={"enable_thinking": False}),
    ]
    with pytest.raises(ValidationError, match="shares must sum to 1"):
        ReasoningSamplesConfig(sampling_variants=[{"name": "thinking", "share": 0.5}])


def test_the_variants_read_back_from_the_sample_sets_recipe_and_none_recorded_reads_none(tmp_path):
    from eagle_assets.reasoning_samples.recipe import Recipe
    from eagle_assets.reasoning_samples.sample_sets import open_sample_set
    from tests.helpers.upstream import model_folder, served_from

    verifier = served_from(model_folder(tmp_path / "model"))
    with_variants = Recipe.of(verifier, Sampling(), [THINKING, INSTANT], "last")
    folder = open_sample_set(tmp_path / "partition", with_variants, "refuse").folder
    assert read_variants(folder) == [THINKING, INSTANT]
    without = open_sample_set(tmp_path / "partition", Recipe.of(verifier, Sampling(), [], "last"), "new_sample_set")
    assert read_variants(without.folder) == []
    assert read_variants(tmp_path / "partition" / "recipes" / "unpublished") == []  # no set there


def test_evaluation_requests_keep_the_variants_switches_but_decode_greedily():
    from eagle_assets.eagle3_eval.evaluate import greedy_request

    request = PromptRequest(
        "p1",
        [{"role": "user", "content": "hi"}],
        "heldout",
        SamplingVariant("hot", 1.0, temperature=1.0, chat_template_kwargs={"enable_thinking": False}).sampling(
            Sampling(seed=3)
        ),
    )
    greedy = greedy_request(request, max_tokens=64).sampling
    assert (greedy.temperature, greedy.top_p, greedy.max_tokens, greedy.seed) == (0.0, 1.0, 64, None)
    assert greedy.chat_template_kwargs == {"enable_thinking": False} and greedy.variant == "hot"


def test_a_reply_the_local_template_cannot_render_is_a_completion_mismatch_not_a_crash():
    # tiny-kimi in instant mode sometimes writes a thinking block anyway; its chat template renders a reply's
    # reasoning only with thinking on, so the local render cannot locate that reply.
    import pyarrow as pa

    from eagle_assets.token_sequences.drift import measure_drift

    samples = pa.table(
        {
            "prompt_id": ["a", "b"],
            "status": ["ok", "ok"],
            "prompt_token_ids": [[1, 2], [1, 3]],
            "token_ids": [[5, 6], [7, 8]],
            "reasoning": [None, "thought"],
            "content": ["x", "y"],
            "sampling": [json.dumps({"chat_template_kwargs": {"enable_thinking": False}})] * 2,
        }
    )
    messages = {"a": [{"role": "user", "content": "A"}], "b": [{"role": "user", "content": "B"}]}
    seen = []

    def render(context, reasoning, content, template_kwargs):
        seen.append(template_kwargs)
        if reasoning:
            raise ValueError("the chat template renders the conversation differently with the reply appended")
        return [1, 2], [5, 6]

    report = measure_drift(samples, messages, render, sample_size=2)
    assert (report.checked, report.prompt_mismatches, report.completion_mismatches) == (2, 0, 1)
    assert "b: reply not renderable" in report.examples[0]
    assert seen == [{"enable_thinking": False}] * 2  # rendered as the server was asked
