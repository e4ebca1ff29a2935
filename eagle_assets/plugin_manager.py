"""The one plugin manager: hook specs, then entry-point plugins, then the built-ins.

Set ``EAGLE_ASSETS_DISABLE_ENTRY_POINTS=1`` to load only the built-ins (useful when a broken
third-party plugin is installed). A plugin that fails to import is recorded in
:data:`load_errors` by name, and every other plugin still loads.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass

import pluggy

from eagle_assets import hookspecs
from eagle_assets.backends import VerifierBackend
from eagle_assets.sources import DatasetSource

ENTRY_POINT_GROUP = "eagle_assets"
DISABLE_ENV = "EAGLE_ASSETS_DISABLE_ENTRY_POINTS"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "eagle_assets.plugins.demo_source",
    "eagle_assets.plugins.local_files",
    "eagle_assets.plugins.open_perfectblend",
)


@dataclass(frozen=True)
class PluginLoadError:
    plugin: str
    error: str


pm = pluggy.PluginManager("eagle_assets")
pm.add_hookspecs(hookspecs)
load_errors: list[PluginLoadError] = []


def _load_entry_points() -> None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:  # a broken third-party plugin must not take the code location down
            load_errors.append(PluginLoadError(ep.name, f"{type(exc).__name__}: {exc}"))


def _load_default_plugins() -> None:
    for module_name in DEFAULT_PLUGINS:
        if pm.get_plugin(module_name) is not None:
            continue
        try:
            pm.register(importlib.import_module(module_name), name=module_name)
        except Exception as exc:
            load_errors.append(PluginLoadError(module_name, f"{type(exc).__name__}: {exc}"))


if not os.environ.get(DISABLE_ENV):
    _load_entry_points()
_load_default_plugins()


def _collect(hook, kind: str, cls: type) -> dict:
    found: dict = {}

    def register(obj) -> None:
        if not isinstance(obj, cls):
            raise TypeError(f"register() for {kind} needs a {cls.__name__}, got {type(obj).__name__}")
        if obj.name in found:
            raise ValueError(f"two {kind} are named {obj.name!r}: rename one of them")
        found[obj.name] = obj

    hook(register=register)
    return found


def dataset_sources() -> dict[str, DatasetSource]:
    """Every registered dataset source by name, in a stable (sorted) order."""
    found = _collect(pm.hook.register_dataset_sources, "dataset sources", DatasetSource)
    return dict(sorted(found.items()))


def verifier_backends() -> dict[str, VerifierBackend]:
    """Every registered verifier backend by name, in a stable (sorted) order."""
    found = _collect(pm.hook.register_verifier_backends, "verifier backends", VerifierBackend)
    return dict(sorted(found.items()))


def dataset_source(name: str) -> DatasetSource:
    sources = dataset_sources()
    if name not in sources:
        raise KeyError(
            f"unknown dataset source {name!r}; registered: {', '.join(sources) or 'none'}. "
            "Install or register the plugin that provides it (`eagle-assets plugins` lists them)."
        )
    return sources[name]


def verifier_backend(name: str) -> VerifierBackend:
    backends = verifier_backends()
    if name not in backends:
        raise KeyError(
            f"unknown verifier backend {name!r}; registered: {', '.join(backends) or 'none'}. "
            "`eagle-assets plugins` lists them."
        )
    return backends[name]
