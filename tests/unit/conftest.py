"""Unit tests read the tiny verifiers' tokenizer, chat template, config and weight names, never what their
training taught them: they get quick builds of the same recipes (same tokenizer, two optimizer steps),
made in seconds on a fresh machine instead of minutes. Tests of the trained behaviour and of the default
builds themselves are in tests/integration/tiny_verifier/. The fixtures have names of their own: the session's
server fixtures (tests/conftest.py) take ``tiny_verifier``, and must get the default build whichever test
starts them."""

from __future__ import annotations

import dataclasses

import pytest

from eagle_assets.tiny_verifier.recipe import DEFAULT_KIMI_RECIPE, DEFAULT_RECIPE

QUICK_STEPS = {"train_steps": 2, "batch_size": 4}


@pytest.fixture(scope="session")
def quick_tiny_verifier():
    """tiny-qwen3's tokenizer, template and architecture with untrained weights."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_verifier

    return cached_tiny_verifier(recipe=dataclasses.replace(DEFAULT_RECIPE, **QUICK_STEPS))


@pytest.fixture(scope="session")
def quick_tiny_kimi():
    """tiny-kimi's tokenizer, template and architecture with untrained weights."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_verifier

    return cached_tiny_verifier(recipe=dataclasses.replace(DEFAULT_KIMI_RECIPE, **QUICK_STEPS))
