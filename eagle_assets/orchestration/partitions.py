"""The per-dataset partitions: one static partition per registered dataset source."""

from __future__ import annotations

import dagster as dg

from eagle_assets.plugin_manager import dataset_sources


def source_partitions() -> dg.StaticPartitionsDefinition:
    """Built from the plugin registry each time the code location loads."""
    return dg.StaticPartitionsDefinition(list(dataset_sources()))
