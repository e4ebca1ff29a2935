"""Shared fixtures: one tiny verifier and one real vLLM server per test run (built/started lazily)."""

from __future__ import annotations

import os

import pytest
from dagster_ui import dagster_ui  # noqa: F401  (the one `dagster dev` of a test run, for every UI test)

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


# The one test server: the first free port from here (CI machines run one test session at a time).
VLLM_TEST_PORTS = range(8300, 8350)


def _free_port(ports: range) -> int:
    from eagle_assets.resources.server_process import port_in_use

    port = next((p for p in ports if not port_in_use("127.0.0.1", p)), None)
    if port is None:
        pytest.fail(f"no free port for a test vLLM server in {ports}")
    return port


@pytest.fixture(scope="session")
def vllm_server_config(tiny_verifier, tmp_path_factory):
    """The VLLMServer resource of the session's test server (tiny verifier, small CPU KV cache)."""
    from eagle_assets.resources import VLLMServer

    return VLLMServer(
        model=str(tiny_verifier),
        port=_free_port(VLLM_TEST_PORTS),
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
    from eagle_assets.tiny_verifier import cached_tiny_kimi

    return cached_tiny_kimi()


KIMI_TEST_PORTS = range(8350, 8400)


@pytest.fixture(scope="session")
def kimi_server_config(tiny_kimi, tmp_path_factory):
    """The VLLMServer resource serving tiny-kimi as the demo does (kimi_k2 parser, vision inputs off)."""
    from eagle_assets.tiny_verifier.embedded import embedded_resources

    return embedded_resources(
        "tiny-kimi", port=_free_port(KIMI_TEST_PORTS), max_model_len=16384, max_num_seqs=256,
        state_dir=str(tmp_path_factory.mktemp("kimi-vllm-state")), stop_grace_s=20.0,
    )["vllm_server"]


@pytest.fixture(scope="session")
def kimi_server_urls(kimi_server_config):
    """ONE real vLLM server on tiny-kimi for the whole run (started on first use); its base URLs."""
    with kimi_server_config.serve() as urls:
        yield urls
