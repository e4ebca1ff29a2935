"""The spread of repeated timings, as every benchmark here prints it."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> float:
    """(max - min) / median: how far apart the repeats of one measurement landed."""
    return (max(values) - min(values)) / statistics.median(values)
