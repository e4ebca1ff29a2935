"""eagle-assets: a Dagster code location that turns prompt datasets into EAGLE-3 drafts."""

__version__ = "0.1.0"

# Plugins write `from eagle_assets import hookimpl` (see eagle_assets.hookspecs).
from eagle_assets.hookspecs import hookimpl

__all__ = ["__version__", "hookimpl"]
