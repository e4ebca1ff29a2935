"""Where assets write their files."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import Field

DEFAULT_ROOT_ENV = "EAGLE_ASSETS_DATA"


def default_root() -> str:
    return os.environ.get(DEFAULT_ROOT_ENV, str(Path.cwd() / ".eagle_assets_data"))


class StorageRoot(dg.ConfigurableResource):
    """The folder under which every asset keeps its files: `<root>/<asset>/<partition>/...`."""

    root: str = Field(
        default_factory=default_root,
        description=f"Storage root folder (default: ${DEFAULT_ROOT_ENV} or ./.eagle_assets_data).",
    )

    def path(self, asset: str, partition: str | None = None) -> Path:
        """The folder of one asset (and partition), created if missing."""
        folder = Path(self.root) / asset
        if partition is not None:
            folder = folder / partition
        folder.mkdir(parents=True, exist_ok=True)
        return folder
