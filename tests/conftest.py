"""Fixtures every kind of test shares: the embedded tiny verifiers, one real vLLM server per verifier and
one `dagster dev` per test run (each started on first use), random training features.

Where a test lives says what it needs: ``unit/`` (in-process, no server), ``integration/`` (the real vLLM
server, real Dagster processes), ``e2e/`` (the demo, crashes, the browser); each test carries that
folder's marker, so ``-m "not e2e"`` and the like select by kind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never see a user's entry-point plugins unless they register them themselves.
os.environ.setdefault("EAGLE_ASSETS_DISABLE_ENTRY_POINTS", "1")

KINDS = ("unit", "integration", "e2e")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        kind = Path(item.path).relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)


@pytest.fixture
def storage_root(tmp_path):
    """A StorageRoot resource in a fresh folder."""
    from eagle_assets.resources import StorageRoot

    return StorageRoot(root=str(tmp_path / "data"))


@pytest.fixture(scope="session")
def tiny_verifier():
    """The embedded tiny verifier's model folder (built once per recipe into the user cache, then reused)."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_verifier

    return cached_tiny_verifier()


@pytest.fixture(scope="session")
def vllm_server_config(tiny_verifier, tmp_path_factory):
    """The VLLMServer resource of the session's test server (tiny verifier, small CPU KV cache)."""
    from eagle_assets.resources import VLLMServer
    from tests.helpers.ports import free_port

    return VLLMServer(
        model=str(tiny_verifier),
        port=free_port(),
        max_model_len=16384,  # the tiny verifier's own limit: room for max_tokens 8192
        max_num_seqs=256,
        # Dev mode serves /server_info, where vLLM names the draft it speculates with (none here).
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
        state_dir=str(tmp_path_factory.mktemp("vllm-state")),
        stop_grace_s=20.0,
    )


@pytest.fixture(scope="session")
def vllm_server_urls(vllm_server_config):
    """ONE real vLLM server on the tiny verifier for the whole run, started by the resource; its base URLs."""
    with vllm_server_config.serve() as urls:
        yield urls


@pytest.fixture(scope="session")
def tiny_kimi():
    """tiny-kimi's model folder (the Kimi-K2.5-shaped embedded verifier; built once per recipe, then reused)."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_kimi

    return cached_tiny_kimi()


@pytest.fixture(scope="session")
def kimi_server_config(tiny_kimi):
    """The VLLMServer resource serving tiny-kimi exactly as `eagle-assets demo --verifier tiny-kimi --port
    <its port>` does (kimi_k2 parser, vision inputs off, the demo's KV cache and state folder), so the
    tiny-kimi demo attaches to this server; the port after it is left for the demo's speculating server."""
    from eagle_assets.tiny_verifier.embedded import embedded_resources
    from tests.helpers.ports import free_port
    from tests.helpers.runs import KV_CACHE_GB

    return embedded_resources("tiny-kimi", port=free_port(span=2), env={"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GB})[
        "vllm_server"]


@pytest.fixture(scope="session")
def kimi_server_urls(kimi_server_config):
    """ONE real vLLM server on tiny-kimi for the whole run (started on first use); its base URLs."""
    with kimi_server_config.serve() as urls:
        yield urls


@pytest.fixture(scope="session")
def dagster_ui(tmp_path_factory):
    """The session's ``dagster dev`` with a throwaway DAGSTER_HOME and storage root; yields its base URL."""
    from tests.helpers.dagster_ui import serve_ui

    with serve_ui(tmp_path_factory.mktemp("dagster_home"), tmp_path_factory.mktemp("data")) as url:
        yield url


@pytest.fixture(scope="session")
def random_features(tmp_path_factory):
    """(storage root, verifier folder): random features for two partitions and a head-only verifier
    (tests/helpers/features.py's ``write_random_storage``). Shared read-only: a test that changes them
    works on a copy."""
    from tests.helpers.features import write_random_storage

    return write_random_storage(tmp_path_factory.mktemp("features"))
