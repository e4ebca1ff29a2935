"""Read one dataset source into validated, de-duplicated, optionally sampled prompts.

Kept apart from the Dagster asset so the rules (dedup, sampling, what happens when a source fails)
can be tested and reused without a run.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from eagle_assets.prompts.records import Prompt, Skip, classify
from eagle_assets.prompts.splits import SplitRule
from eagle_assets.sources import DatasetSource, SourceUnavailable

PROGRESS_EVERY_S = 5.0


@dataclass
class Collection:
    """What reading a source produced, with every count the asset reports."""

    source: str
    prompts: list[Prompt] = field(default_factory=list)
    rows_read: int = 0
    unique: int = 0  # valid, de-duplicated prompts before the limit's sample
    duplicates: int = 0
    skips: list[Skip] = field(default_factory=list)
    # Set when the source raised part-way: the rows read until then are kept.
    error: str | None = None

    @property
    def skipped_by_reason(self) -> Counter:
        return Counter(s.reason for s in self.skips)


def collect(
    source: DatasetSource,
    location: str | None = None,
    *,
    limit: int | None = None,
    seed: int = 0,
    rule: SplitRule = SplitRule(),
    progress: Callable[[Collection, float], None] | None = None,
) -> Collection:
    """Read every row of ``source``; keep a seeded uniform sample of ``limit`` unique prompts.

    The sample is a reservoir (memory bounded by ``limit``, not by the dataset) and is returned in
    dataset order. :class:`SourceUnavailable` before the first row propagates (nothing to keep);
    any other exception is recorded in :attr:`Collection.error` and the rows read so far are kept.
    """
    out = Collection(source.name)
    rng = random.Random(seed)
    reservoir: list[tuple[int, Prompt]] = []
    seen: set[str] = set()
    started = last_report = time.monotonic()
    last_row = "(none)"
    try:
        for item in source.records(location):
            out.rows_read += 1
            last_row = item.row
            result = classify(source.name, item, rule)
            if isinstance(result, Skip):
                out.skips.append(result)
            elif result.prompt_id in seen:
                out.duplicates += 1
            else:
                seen.add(result.prompt_id)
                index, out.unique = out.unique, out.unique + 1
                if limit is None or index < limit:
                    reservoir.append((index, result))
                else:
                    slot = rng.randrange(index + 1)
                    if slot < limit:
                        reservoir[slot] = (index, result)
            now = time.monotonic()
            if progress is not None and now - last_report >= PROGRESS_EVERY_S:
                progress(out, now - started)
                last_report = now
    except Exception as exc:  # a plugin bug or a corrupt file part-way: keep what was read, say where
        if isinstance(exc, SourceUnavailable) and out.rows_read == 0:
            raise
        out.error = (
            f"source {source.name!r} raised {type(exc).__name__}: {exc} after {out.rows_read} rows "
            f"(last row read: {last_row}); the rows read before it are kept. Fix the data or the "
            "plugin and re-materialize this partition."
        )
    out.prompts = [p for _, p in sorted(reservoir, key=lambda pair: pair[0])]
    return out
