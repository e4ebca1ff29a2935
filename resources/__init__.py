"""Dagster resources of eagle-assets (installed as ``eagle_assets.resources``)."""

from eagle_assets.resources.storage import StorageRoot

__all__ = ["StorageRoot"]
