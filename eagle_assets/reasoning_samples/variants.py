"""Sampling variants: each prompt regenerated in one of several modes (thinking on or off, a temperature).

A served reasoning model answers in more than one way -- Kimi-K2.5 in thinking and instant modes, at the
temperatures its users pick -- and a draft must predict each. ``reasoning_samples`` can assign every prompt
one variant with given shares. The choice is a function of the prompt id alone (a hash mapped onto the
cumulative shares), so a resumed or repeated capture, the evaluation and a reader of lineage all find the
same variant for the same prompt without storing a table of assignments. The variants are part of the
sample set's recipe (``recipe.json``, :mod:`.recipe`), and every row's ``sampling`` JSON names its variant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from eagle_assets.reasoning_samples.recipe import read_recipe
from eagle_assets.reasoning_samples.requests import Sampling

SHARE_TOLERANCE = 1e-6


class VariantsError(ValueError):
    """The variants cannot be used; the message names the field and the fix."""


@dataclass(frozen=True)
class SamplingVariant:
    """One way of asking the verifier: a share of the prompts, and what it changes in the request."""

    name: str
    share: float
    temperature: float | None = None  # None: the capture's own temperature
    top_p: float | None = None
    chat_template_kwargs: dict = field(default_factory=dict)  # merged over the capture's own

    def sampling(self, base: Sampling) -> Sampling:
        """``base`` with this variant's changes, naming the variant (stored with every row)."""
        return replace(
            base,
            temperature=base.temperature if self.temperature is None else self.temperature,
            top_p=base.top_p if self.top_p is None else self.top_p,
            chat_template_kwargs={**base.chat_template_kwargs, **self.chat_template_kwargs},
            variant=self.name,
        )


def validate_variants(variants: Sequence[SamplingVariant], field_name: str = "sampling_variants") -> None:
    """Names unique and non-empty, shares positive and summing to 1."""
    if not variants:
        return
    names = [v.name for v in variants]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise VariantsError(f"{field_name}: every variant needs its own non-empty name (got {names})")
    if any(v.share <= 0 for v in variants):
        raise VariantsError(
            f"{field_name}: every share must be > 0 (got "
            f"{ {v.name: v.share for v in variants} }); drop a variant instead of giving it 0"
        )
    total = sum(v.share for v in variants)
    if abs(total - 1.0) > SHARE_TOLERANCE:
        raise VariantsError(
            f"{field_name}: shares must sum to 1, they sum to {total:g} "
            f"({ {v.name: v.share for v in variants} }): scale them"
        )


def unit_interval(prompt_id: str) -> float:
    """A number in [0, 1) fixed by the prompt id alone."""
    digest = hashlib.sha256(f"sampling-variant:{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def assign_variant(prompt_id: str, variants: Sequence[SamplingVariant]) -> SamplingVariant | None:
    """The variant of ``prompt_id`` (None when there are no variants)."""
    if not variants:
        return None
    point, cumulative = unit_interval(prompt_id), 0.0
    for variant in variants:
        cumulative += variant.share
        if point < cumulative:
            return variant
    return variants[-1]  # rounding of shares that sum to 1 within the tolerance


def read_variants(folder: Path) -> list[SamplingVariant]:
    """The variants of the sample set ``folder``'s recipe ([] without variants, or without a recipe)."""
    recipe = read_recipe(folder)
    return [SamplingVariant(**entry) for entry in recipe.settings["sampling_variants"]] if recipe else []
