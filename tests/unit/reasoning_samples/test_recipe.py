"""The generation recipe: what it fingerprints of the served verifier (which folder, and why), what its id
covers, and that it reads back from its sample set as it was."""

from __future__ import annotations

import json
import shutil

import pytest

from eagle_assets.reasoning_samples.capture_partition import CaptureSettings
from eagle_assets.reasoning_samples.recipe import (
    SERVED_FOLDER,
    VERIFIER_FOLDER,
    Recipe,
    chat_template_hash,
    read_recipe,
    served_verifier,
    tokenizer_hash,
    write_recipe,
)
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.variants import SamplingVariant
from eagle_assets.resources import Verifier, VLLMServer
from tests.helpers.upstream import model_folder, served_from


def test_the_hashes_are_those_token_sequences_compares_and_a_template_edit_is_no_tokenizer_change(
    quick_tiny_verifier, tmp_path
):
    from transformers import AutoTokenizer

    from eagle_assets.token_sequences.build import template_hash

    assert chat_template_hash(quick_tiny_verifier) == template_hash(AutoTokenizer.from_pretrained(quick_tiny_verifier))
    copy = tmp_path / "copy"
    shutil.copytree(quick_tiny_verifier, copy)
    assert tokenizer_hash(copy) == tokenizer_hash(quick_tiny_verifier)  # content, not the path
    (copy / "chat_template.jinja").write_text("{{ messages }}")
    assert chat_template_hash(copy) != chat_template_hash(quick_tiny_verifier)
    assert tokenizer_hash(copy) == tokenizer_hash(quick_tiny_verifier)
    vocabulary = json.loads((copy / "tokenizer.json").read_text())
    vocabulary["added_tokens"] = vocabulary["added_tokens"][:-1]
    (copy / "tokenizer.json").write_text(json.dumps(vocabulary))
    assert tokenizer_hash(copy) != tokenizer_hash(quick_tiny_verifier)
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        tokenizer_hash(tmp_path)


def test_a_served_model_folder_is_fingerprinted_else_the_verifier_resources(tmp_path):
    served, local = model_folder(tmp_path / "served", "served"), model_folder(tmp_path / "local", "local")
    verifier = Verifier(model_path=str(local))
    managed = served_verifier(VLLMServer(model=str(served), reasoning_parser="kimi_k2"), verifier)
    assert (managed.model, managed.folder, managed.fingerprinted) == (str(served), str(served), SERVED_FOLDER)
    assert managed.tokenizer_hash == tokenizer_hash(served) and managed.reasoning_parser == "kimi_k2"
    # An external server set to a local folder is fingerprinted by it ...
    named = served_verifier(VLLMServer(mode="external", base_urls=["http://x/v1"], model=str(served)), verifier)
    assert named.folder == str(served) and named.fingerprinted == SERVED_FOLDER
    # ... one that names no model, or a model that is no folder here, by the verifier resource's folder.
    for model in ("", "moonshotai/Kimi-K2.5"):
        external = served_verifier(VLLMServer(mode="external", base_urls=["http://x/v1"], model=model), verifier)
        assert (external.model, external.folder) == (model or None, str(local))
        assert external.fingerprinted == VERIFIER_FOLDER and external.tokenizer_hash == tokenizer_hash(local)
    assert served_verifier(VLLMServer(model="org/model", reasoning_parser=""), verifier).reasoning_parser is None


def test_the_id_covers_the_verifier_and_every_setting_and_reads_back_from_the_set(tmp_path):
    verifier = served_from(model_folder(tmp_path / "model"))
    base = CaptureSettings(sampling=Sampling(seed=3, chat_template_kwargs={"enable_thinking": True}))
    recipe = base.recipe(verifier)
    assert len(recipe.recipe_id) == 16 and recipe.recipe_id == base.recipe(verifier).recipe_id
    variants = [SamplingVariant("thinking", 0.5), SamplingVariant("instant", 0.5, temperature=0.0)]
    others = [
        Recipe.of(verifier, Sampling(seed=3, chat_template_kwargs={"enable_thinking": False}), [], "last"),
        Recipe.of(verifier, Sampling(seed=4, chat_template_kwargs={"enable_thinking": True}), [], "last"),
        Recipe.of(verifier, base.sampling, variants, "last"),
        Recipe.of(verifier, base.sampling, [], "all"),
        Recipe.of(served_from(model_folder(tmp_path / "model"), "deepseek_r1"), base.sampling, [], "last"),
        Recipe.of(served_from(model_folder(tmp_path / "other", "v2")), base.sampling, [], "last"),
    ]
    assert len({recipe.recipe_id, *(r.recipe_id for r in others)}) == 1 + len(others)
    # What only changes how samples are asked for or judged is no part of it.
    plumbing = CaptureSettings(sampling=base.sampling, splits=["train"], rows_per_shard=3, flush_interval_s=1.0)
    assert plumbing.recipe(verifier).recipe_id == recipe.recipe_id
    assert recipe.changed_settings(others[3]) == [("turns", "last", "all")]

    write_recipe(tmp_path / "set", recipe)
    stored = json.loads((tmp_path / "set" / "recipe.json").read_text())
    assert stored["recipe_id"] == recipe.recipe_id and stored["settings"]["seed"] == 3
    assert read_recipe(tmp_path / "set") == recipe and read_recipe(tmp_path / "set").recipe_id == recipe.recipe_id
    write_recipe(tmp_path / "set", others[0])  # a set's recipe is written once
    assert read_recipe(tmp_path / "set") == recipe
    assert read_recipe(tmp_path / "nothing") is None
