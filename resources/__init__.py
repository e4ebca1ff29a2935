"""Dagster resources of eagle-assets (installed as ``eagle_assets.resources``)."""

from eagle_assets.resources.storage import StorageRoot
from eagle_assets.resources.verifier import Verifier
from eagle_assets.resources.vllm_server import VLLMServer

__all__ = ["StorageRoot", "VLLMServer", "Verifier"]
