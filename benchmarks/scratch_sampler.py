"""The most bytes the online-features scratch folders held at once, counted as the connector counts them
against the scratch cap; for the online benchmark and tests."""

from __future__ import annotations

import threading
from pathlib import Path

from eagle_assets.core.layout import ONLINE_SCRATCH_PREFIX
from eagle_assets.hidden_states.vllm_connector import folder_bytes


class ScratchSampler(threading.Thread):
    """The most bytes the online scratch folders held at one sample (every ``every_s``), counted as the
    connector counts them against the cap; ``busy``: samples that found any."""

    def __init__(self, work: Path, every_s: float = 0.01):
        super().__init__(daemon=True)
        self.work, self.every_s, self.peak, self.busy, self.samples = work, every_s, 0, 0, 0
        self.done = threading.Event()

    def held(self) -> int:
        total = 0
        for folder in self.work.glob(f"{ONLINE_SCRATCH_PREFIX}*"):
            try:
                total += folder_bytes(folder)
            except (FileNotFoundError, NotADirectoryError):  # removed as the server stopped
                continue
        return total

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            held = self.held()
            self.peak, self.busy, self.samples = max(self.peak, held), self.busy + (held > 0), self.samples + 1

    def __enter__(self) -> ScratchSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.join()
