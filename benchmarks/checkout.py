"""Import the project from a plain checkout too: the GPU host has no ``pip install -e .``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def import_project() -> None:
    """Put the checkout on ``sys.path`` and map ``plugins/`` to ``eagle_assets.plugins`` the way pyproject's
    package-dir does."""
    sys.path.insert(0, str(ROOT))
    if importlib.util.find_spec("eagle_assets.plugins") is None:
        spec = importlib.util.spec_from_file_location(
            "eagle_assets.plugins", ROOT / "plugins" / "__init__.py", submodule_search_locations=[str(ROOT / "plugins")]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["eagle_assets.plugins"] = module
        spec.loader.exec_module(module)
