"""Shared fixtures: one tiny verifier and one real vLLM server per test run (built/started lazily)."""

from __future__ import annotations

import os

import pytest

# Tests never see a user's entry-point plugins unless they register them themselves.
os.environ.setdefault("EAGLE_ASSETS_DISABLE_ENTRY_POINTS", "1")


@pytest.fixture
def storage_root(tmp_path):
    """A StorageRoot resource in a fresh folder."""
    from eagle_assets.resources import StorageRoot

    return StorageRoot(root=str(tmp_path / "data"))


@pytest.fixture(scope="session")
def tiny_verifier():
    """The embedded tiny verifier's model folder (built once per recipe into the user cache, then reused)."""
    from eagle_assets.tiny_verifier import cached_tiny_verifier

    return cached_tiny_verifier()
