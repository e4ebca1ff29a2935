"""Every text the Dagster UI shows from the code is Markdown: the UI renders descriptions as Markdown, where
RST's double backticks and Sphinx roles (:mod:`x`) show as literal punctuation."""

from __future__ import annotations

import re
from collections.abc import Iterator

import dagster as dg

from eagle_assets.definitions import build_definitions

# ``x`` (RST inline literal) and :role:`x` (Sphinx cross-reference); Markdown spells both `x`.
RST = re.compile(r"``|:[a-z]+:`")


def config_texts(field: dg.Field | None, where: str) -> Iterator[tuple[str, str | None]]:
    """A config field's description (a Config class's docstring at the top) and its fields', nested."""
    if field is None:
        return
    yield where, field.description
    for name, child in (getattr(field.config_type, "fields", None) or {}).items():
        yield from config_texts(child, f"{where}.{name}")


def shown_texts(defs: dg.Definitions) -> Iterator[tuple[str, str | None]]:
    """(where, text) of each description the UI shows: assets, checks, jobs, resources, their config."""
    repo = defs.get_repository_def()
    for assets_def in repo.assets_defs_by_key.values():
        for key, spec in assets_def.specs_by_key.items():
            yield f"asset {key.to_user_string()}", spec.description
        if assets_def.is_executable and assets_def.op.config_schema is not None:
            yield from config_texts(
                assets_def.op.config_schema.as_field(), f"asset {assets_def.key.to_user_string()} config"
            )
    # Checks declared on their asset (check_specs of @asset) and checks of their own (@asset_check).
    check_specs = {
        spec.key: spec
        for definition in [*repo.assets_defs_by_key.values(), *repo.asset_checks_defs_by_key.values()]
        for spec in definition.check_specs
    }
    for spec in check_specs.values():
        yield f"check {spec.asset_key.to_user_string()}:{spec.name}", spec.description
    for job in repo.get_all_jobs():
        yield f"job {job.name}", job.description
    for name, resource in repo.get_top_level_resources().items():
        yield f"resource {name}", resource.description
        if resource.config_schema is not None:
            yield from config_texts(resource.config_schema.as_field(), f"resource {name} config")


def test_the_texts_the_ui_shows_are_markdown_not_rst():
    texts = list(shown_texts(build_definitions()))
    # The walk reaches config fields and checks declared on their asset.
    assert {"resource storage config.root", "check prompts:has_prompts"} <= {where for where, _ in texts}
    rst = [
        f"{where}: {RST.search(text).group()} in {text[:80]!r}" for where, text in texts if text and RST.search(text)
    ]
    assert not rst, "RST markup where the UI renders Markdown (write `x`, not ``x`` or :role:`x`):\n" + "\n".join(rst)
