"""The resources that serve and read an embedded verifier consistently."""

from __future__ import annotations

from eagle_assets.resources.verifier import Verifier
from eagle_assets.resources.vllm_server import VLLMServer
from eagle_assets.tiny_verifier.embedded import embedded_verifier


def embedded_resources(name: str, **server_settings) -> dict:
    """The ``verifier`` and ``vllm_server`` resources for the embedded verifier ``name``: the same model,
    its backend and its reasoning parser (``server_settings`` are further VLLMServer fields, e.g. port)."""
    preset = embedded_verifier(name)
    return {
        "verifier": Verifier(embedded=name, backend=preset.backend),
        "vllm_server": VLLMServer(embedded=name, reasoning_parser=preset.reasoning_parser, **server_settings),
    }
