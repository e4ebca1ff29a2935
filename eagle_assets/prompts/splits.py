"""Splits by *problem*: ``train``, ``validation`` and ``heldout``, from a hash of each prompt's group.

* ``train`` -- what the draft is trained on;
* ``validation`` -- the checkpoint's early stopping and best-epoch choice (and any recipe tuning);
* ``heldout`` -- only the reported acceptance (``eagle3_eval``); never trained on, never tuned on.

A prompt's *group* is the problem it asks. A dataset row may name it (a ``group`` key, e.g. the demo's
operator and operands, so "What is 12 + 34?" and "Compute 12 + 34." are one group); otherwise it is
the normalized text of the conversation's non-system turns (case folded, punctuation turned into
spaces, whitespace collapsed, digits kept), so the same question typed with other capitals, spacing or
punctuation is one group too. A system prompt restyles an answer without changing the problem, so it
is not part of the default key. The split hashes the group id, so one problem never lands on two
sides, whatever its wording or source.

``heldout`` takes the lowest ``heldout_fraction`` of the hash range and ``validation`` the highest
``validation_fraction``: changing one fraction moves prompts between that split and ``train`` only.

The split is a fact of the *current* ``prompts`` table: every stage that filters by split reads it
from there (:func:`read_current_splits`), never from a label copied at capture time.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from eagle_assets.core.layout import HELDOUT, TRAIN, VALIDATION, prompts_file

DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_HELDOUT_FRACTION = 0.1

_NOT_WORD = re.compile(r"[\W_]+")


def normalized_text(text: str) -> str:
    """Case folded, every run of non-letters/non-digits turned into one space, ends trimmed."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def default_group_key(messages: list[dict[str, str]]) -> str:
    """The normalized text of the non-system turns, in order (roles kept: history is part of it)."""
    return "\n".join(f"{m['role']}: {normalized_text(m['content'])}" for m in messages if m["role"] != "system")


def group_id(key: str) -> str:
    """16 hex digits naming a group; the same key from any source gives the same id."""
    return hashlib.sha256(f"group:{key}".encode()).hexdigest()[:16]


def check_fractions(validation_fraction: float, heldout_fraction: float) -> None:
    """Both in [0, 1) and together below 1 (something must be left to train on)."""
    for name, value in (("validation_fraction", validation_fraction), ("heldout_fraction", heldout_fraction)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} is {value}: give a fraction in [0, 1)")
    if validation_fraction + heldout_fraction >= 1.0:
        raise ValueError(
            f"validation_fraction {validation_fraction} + heldout_fraction {heldout_fraction} >= 1 leaves no "
            "train split: lower one of them"
        )


def split_for(
    group: str,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
) -> str:
    """The split of a group id: ``heldout`` at the bottom of the hash range, ``validation`` at the top."""
    check_fractions(validation_fraction, heldout_fraction)
    # Hashed again (salted): the split must not depend on bits anything else is keyed on.
    bucket = int.from_bytes(hashlib.sha256(f"split:{group}".encode()).digest()[:8], "big") / 2**64
    if bucket < heldout_fraction:
        return HELDOUT
    if bucket >= 1.0 - validation_fraction:
        return VALIDATION
    return TRAIN


class MissingPrompts(FileNotFoundError):
    """A partition's prompts table is missing: materialize it."""


@dataclass(frozen=True)
class SplitRule:
    """How the ``prompts`` asset splits one partition. ``evaluation_only``: a source that is an
    evaluation set (e.g. the demo's out-of-distribution prompts) puts every row in ``heldout``."""

    validation_fraction: float = DEFAULT_VALIDATION_FRACTION
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION
    evaluation_only: bool = False

    def __post_init__(self) -> None:
        check_fractions(self.validation_fraction, self.heldout_fraction)

    def split(self, group: str) -> str:
        if self.evaluation_only:
            return HELDOUT
        return split_for(group, self.validation_fraction, self.heldout_fraction)


def read_current_splits(storage_root: Path, partition: str) -> dict[str, tuple[str, str]]:
    """``prompt_id -> (split, group_id)`` from the partition's current prompts table.

    Raises :class:`MissingPrompts` (a :class:`FileNotFoundError`) naming the asset to materialize when there
    is no table.
    """
    return read_splits(prompts_file(storage_root, partition))


def read_splits(path: Path) -> dict[str, tuple[str, str]]:
    """:func:`read_current_splits` of the prompts table at ``path``
    (``<root>/prompts/<partition>/versions/<version>/prompts.parquet``)."""
    path = Path(path)
    partition = path.parents[2].name
    if not path.exists():
        raise MissingPrompts(f"{path} is missing: materialize prompts for partition '{partition}' first")
    table = pq.read_table(path)
    return dict(
        zip(
            table["prompt_id"].to_pylist(),
            zip(table["split"].to_pylist(), table["group_id"].to_pylist(), strict=True),
            strict=True,
        )
    )
