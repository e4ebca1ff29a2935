"""The plot of τ along the generated sequence: one line per prompt set over the output-position bins, so a draft
whose acceptance decays as a long reasoning trace grows is seen at a glance."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path

from eagle_assets.eagle3_eval.per_request import PositionBin


def plot_tau_along_trace(bins: Mapping[str, Sequence[PositionBin]], path: Path, k: int) -> Path | None:
    """Write the PNG to ``path`` (None when no set has a binned step)."""
    if not any(b.tally.steps for set_bins in bins.values() for b in set_bins):
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot is a file
    import matplotlib.pyplot as plt

    labels = [b.label for b in next(iter(bins.values()))]
    figure, axes = plt.subplots(figsize=(7.5, 4.0), dpi=110)
    try:
        for name, set_bins in bins.items():
            x = [i for i, b in enumerate(set_bins) if b.tally.steps]
            if x:
                axes.plot(x, [set_bins[i].tally.tau for i in x], marker="o", label=name)
        axes.set_xticks(range(len(labels)), labels)
        axes.set_xlabel("output position (tokens into the generated sequence)")
        axes.set_ylabel("τ = 1 + accepted / verify steps")
        axes.set_ylim(1.0, k + 1.05)
        axes.set_title(f"Acceptance length along the output, K={k}")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path


def markdown_image(path: Path, title: str) -> str:
    """The PNG inline in Markdown (the UI shows metadata Markdown, not files from the storage root)."""
    return f"![{title}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"
