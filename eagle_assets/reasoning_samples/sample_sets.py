"""A partition's sample sets, one per generation recipe (:mod:`.recipe`), and which one a materialization
continues: ``reasoning_samples/<partition>/recipes/<recipe id>/``, with ``current.json`` naming the set
readers see (``eagle_assets.core.layout.samples_folder``).

A recipe's rows go to its own set only, so samples of two verifiers or two settings are never mixed and a
switch back and forth between them regenerates nothing. Starting a new set costs a full regeneration, so
it happens by itself only where the current rows are of no use to the new recipe (another verifier,
tokenizer, chat template or reasoning parser) or there are none; a change of sampling, variants or turns
while the current set holds ok samples is refused (:class:`SettingsChanged`) unless asked for. The other
sets stay on disk until ``eagle-assets gc`` removes those neither current nor used by a kept checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow.compute as pc
import pyarrow.parquet as pq

from eagle_assets.core.files import write_json
from eagle_assets.core.layout import CURRENT_FILE, RECIPES_DIR, current_version, version_folder
from eagle_assets.core.shards import shard_paths
from eagle_assets.reasoning_samples.recipe import Recipe, read_recipe, write_recipe
from eagle_assets.reasoning_samples.store import load_samples

ChangedSettings = Literal["refuse", "new_sample_set"]


class SettingsChanged(ValueError):
    """The settings differ from the current sample set's; the message names each change and the fix."""


@dataclass(frozen=True)
class SampleSet:
    """The set a materialization writes to, and the sets of other recipes on disk."""

    folder: Path
    recipe: Recipe
    other_recipes_rows: dict[str, int]  # recipe id -> rows stored in its set (every shard row)


def _shard_rows(folder: Path) -> int:
    return sum(pq.read_metadata(path).num_rows for path in shard_paths(folder))


def _refusal(folder: Path, current: Recipe, recipe: Recipe, held: int, ok: int) -> str:
    changes = "; ".join(
        f"{name} {json.dumps(old)} -> {json.dumps(new)}" for name, old, new in current.changed_settings(recipe)
    )
    return (
        f"the settings differ from those of the current sample set ({changes}). That set, {folder}, holds "
        f"{held} samples ({ok} ok) of recipe {current.recipe_id}: adding samples of other settings to it would "
        "mix both in one training set, and a set of its own regenerates every prompt. Either set these back "
        "to continue the current set, or set on_changed_settings: new_sample_set to start a new one (the "
        f"current set stays on disk, and setting them back later reuses it as it is)."
    )


def open_sample_set(partition_folder: Path, recipe: Recipe, on_changed_settings: ChangedSettings) -> SampleSet:
    """The set of ``recipe`` in ``partition_folder``, made current (module docstring: when a new set is
    started, when :class:`SettingsChanged` is raised instead; then nothing is written)."""
    partition_folder = Path(partition_folder)
    folder = version_folder(partition_folder, recipe.recipe_id, RECIPES_DIR)
    current_id = current_version(partition_folder)
    if current_id not in (None, recipe.recipe_id) and read_recipe(folder) is None:
        current_folder = version_folder(partition_folder, current_id, RECIPES_DIR)
        current = read_recipe(current_folder)
        if current is not None and current.verifier == recipe.verifier and on_changed_settings == "refuse":
            status = load_samples(current_folder, columns=["status"])["status"]
            ok = pc.sum(pc.equal(status, "ok")).as_py() or 0
            if ok:
                raise SettingsChanged(_refusal(current_folder, current, recipe, len(status), ok))
    folder.mkdir(parents=True, exist_ok=True)
    write_recipe(folder, recipe)
    write_json({"version": recipe.recipe_id}, partition_folder / CURRENT_FILE)
    others = sorted(p for p in (partition_folder / RECIPES_DIR).iterdir() if p.is_dir() and p != folder)
    return SampleSet(folder, recipe, {p.name: _shard_rows(p) for p in others})
