"""eagle-assets: a Dagster code location that turns prompt datasets into EAGLE-3 drafts."""

__version__ = "0.1.0"
