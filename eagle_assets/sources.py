"""The dataset-source contract: what a plugin registers through ``register_dataset_sources``.

A source yields *raw records*, one per dataset row, in either of the two common chat shapes:

* OpenAI: ``{"messages": [{"role": "user", "content": "..."}, ...]}``
* ShareGPT: ``{"conversations": [{"from": "human", "value": "..."}, ...]}``

plus optional ``"id"``, ``"metadata"`` and ``"group"`` keys. ``group`` names the *problem* a row asks
(rows worded differently but asking the same thing share it); the split hashes it, so such rows never
land on both sides of the train/held-out line. Without it a row's group is its normalized text. The ``prompts``
asset normalizes, validates, dedups and ids them (``eagle_assets.prompts.records``), so a source stays a thin
reader. A row the source cannot even read (a broken JSON line, undecodable bytes) is yielded as
:class:`SkippedRow` with a reason instead of raising, so one bad line never loses the rest of the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class SourceUnavailable(Exception):
    """The dataset cannot be read at all (no location, missing file, not a Parquet file, ...).

    Raise it from :meth:`DatasetSource.records` or :meth:`DatasetSource.resolved_version` before any
    row is yielded, with a message that names the location and the fix.
    """


@dataclass(frozen=True)
class SkippedRow:
    """A row that could not be used, with the reason a user can act on.

    ``kind`` is the counter it is reported under (see ``eagle_assets.prompts.records.SKIP_REASONS``).
    """

    row: str
    reason: str
    kind: str = "unreadable"


@dataclass(frozen=True)
class RawRecord:
    """One dataset row as the source read it. ``row`` locates it (line number, index, file:line)."""

    row: str
    data: dict[str, Any]


@dataclass
class DatasetSource:
    """A named prompt dataset.

    Subclass it and implement :meth:`records`. ``version`` goes into lineage: bump it (or derive it
    from the file's hash / the dataset revision) whenever the rows can change.
    """

    name: str
    description: str
    version: str = "1"
    # Where the rows live when the launchpad gives no ``location`` (a path, a glob or a hub id).
    default_location: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # An evaluation set (e.g. out-of-distribution prompts): every row is ``heldout``, never trained on,
    # and ``eagle3_eval`` reports its acceptance beside the in-distribution held-out one.
    evaluation_only: bool = False

    def records(self, location: str | None = None) -> Iterator[RawRecord | SkippedRow]:
        """Yield every row of the dataset, in a stable order."""
        raise NotImplementedError(f"dataset source {self.name!r} does not implement records()")

    def resolved_version(self, location: str | None = None) -> str:
        """The version string recorded in lineage; sources reading files may hash them here."""
        return self.version
