"""The one plugin manager: hook specs, then entry-point plugins, then single-file plugins, then built-ins.

* Entry points in group ``eagle_assets`` (pip-installed plugin packages). Set
  ``EAGLE_ASSETS_DISABLE_ENTRY_POINTS=1`` to skip them (useful when a broken one is installed).
* ``EAGLE_ASSETS_PLUGINS``: comma-separated module names or ``.py`` file paths, for a plugin that is
  one file and not worth packaging.
* :data:`DEFAULT_PLUGINS`: the built-ins, registered through the very same hooks.

A plugin that fails to import, or whose hook raises, is recorded in :data:`load_errors` by name, and
every other plugin still loads: one broken plugin never takes the code location down.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pluggy

from eagle_assets import hookspecs
from eagle_assets.backends import VerifierBackend
from eagle_assets.sources import DatasetSource
from eagle_assets.suites import EvalSuite

ENTRY_POINT_GROUP = "eagle_assets"
DISABLE_ENV = "EAGLE_ASSETS_DISABLE_ENTRY_POINTS"
PLUGINS_ENV = "EAGLE_ASSETS_PLUGINS"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "eagle_assets.plugins.demo_source",
    "eagle_assets.plugins.local_files",
    "eagle_assets.plugins.open_perfectblend",
    "eagle_assets.plugins.eval_suites",
    "eagle_assets.plugins.transformers_backend",
    "eagle_assets.plugins.vllm_backend",
    "eagle_assets.plugins.kimi_backend",
)


@dataclass(frozen=True)
class PluginLoadError:
    plugin: str
    error: str


@dataclass(frozen=True)
class PluginOrigin:
    """Where a registered plugin came from, for ``eagle-assets plugins``."""

    kind: str  # "entry point" | "EAGLE_ASSETS_PLUGINS" | "built-in" | "registered in code"
    version: str | None = None


pm = pluggy.PluginManager("eagle_assets")
pm.add_hookspecs(hookspecs)
load_errors: list[PluginLoadError] = []
origins: dict[str, PluginOrigin] = {}


def _record_error(plugin: str, exc: BaseException) -> None:
    error = PluginLoadError(plugin, f"{type(exc).__name__}: {exc}")
    if error not in load_errors:
        load_errors.append(error)


def _register(name: str, load, origin: PluginOrigin) -> None:
    if pm.get_plugin(name) is not None:
        return
    try:
        pm.register(load(), name=name)
    except Exception as exc:  # a broken plugin must not take the code location down
        _record_error(name, exc)
        return
    origins[name] = origin


def _import_file(path: str):
    """Import a ``.py`` file as a module named after it (so its hooks show a readable name)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"plugin file {file} does not exist (from ${PLUGINS_ENV})")
    module_name = f"eagle_assets_plugin_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_plugins(environ: Mapping[str, str] = os.environ) -> None:
    """(Re)load every plugin from scratch: entry points, ``$EAGLE_ASSETS_PLUGINS``, built-ins, as ``environ``
    (this process's environment unless given) names them.

    Runs at import; call it again after installing a plugin or changing the environment.
    """
    for plugin in list(pm.get_plugins()):
        pm.unregister(plugin)
    load_errors.clear()
    origins.clear()
    if not environ.get(DISABLE_ENV):
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            version = ep.dist.version if ep.dist is not None else None
            _register(ep.name, ep.load, PluginOrigin("entry point", version))
    for spec in filter(None, (s.strip() for s in environ.get(PLUGINS_ENV, "").split(","))):
        if spec.endswith(".py"):
            _register(spec, lambda spec=spec: _import_file(spec), PluginOrigin(PLUGINS_ENV))
        else:
            _register(spec, lambda spec=spec: importlib.import_module(spec), PluginOrigin(PLUGINS_ENV))
    for module_name in DEFAULT_PLUGINS:
        _register(module_name, lambda m=module_name: importlib.import_module(m), PluginOrigin("built-in"))


def origin(name: str) -> PluginOrigin:
    return origins.get(name, PluginOrigin("registered in code"))


def _collect(hook_name: str, kind: str, cls: type) -> dict[str, tuple[object, str]]:
    """Call one register-callback hook plugin by plugin, so a raising plugin is reported, not fatal.

    Returns ``{name: (object, plugin name)}``.
    """
    found: dict[str, tuple[object, str]] = {}
    for impl in getattr(pm.hook, hook_name).get_hookimpls():

        def register(obj, plugin=impl.plugin_name) -> None:
            if not isinstance(obj, cls):
                raise TypeError(f"register() for {kind} needs a {cls.__name__}, got {type(obj).__name__}")
            if obj.name in found:
                raise ValueError(f"{obj.name!r} is already registered by plugin {found[obj.name][1]!r}")
            found[obj.name] = (obj, plugin)

        try:
            impl.function(**dict.fromkeys(impl.argnames, register))
        except Exception as exc:
            _record_error(impl.plugin_name, RuntimeError(f"{hook_name}: {type(exc).__name__}: {exc}"))
    return dict(sorted(found.items()))


def dataset_source_registrations() -> dict[str, tuple[DatasetSource, str]]:
    """``{source name: (source, plugin name)}`` in a stable (sorted) order."""
    return _collect("register_dataset_sources", "dataset sources", DatasetSource)


def eval_suite_registrations() -> dict[str, tuple[EvalSuite, str]]:
    """``{suite name: (suite, plugin name)}`` in a stable (sorted) order."""
    return _collect("register_eval_suites", "eval suites", EvalSuite)


def verifier_backend_registrations() -> dict[str, tuple[VerifierBackend, str]]:
    """``{backend name: (backend, plugin name)}`` in a stable (sorted) order."""
    return _collect("register_verifier_backends", "verifier backends", VerifierBackend)


def dataset_sources() -> dict[str, DatasetSource]:
    """Every registered dataset source by name, in a stable (sorted) order."""
    return {name: obj for name, (obj, _) in dataset_source_registrations().items()}


def eval_suites() -> dict[str, EvalSuite]:
    """Every registered evaluation suite by name, in a stable (sorted) order."""
    return {name: obj for name, (obj, _) in eval_suite_registrations().items()}


def verifier_backends() -> dict[str, VerifierBackend]:
    """Every registered verifier backend by name, in a stable (sorted) order."""
    return {name: obj for name, (obj, _) in verifier_backend_registrations().items()}


def _lookup(registered: dict, kind: str, name: str):
    if name not in registered:
        raise KeyError(
            f"unknown {kind} {name!r}; registered: {', '.join(registered) or 'none'}. "
            "Install or register the plugin that provides it (`eagle-assets plugins` lists them)."
        )
    return registered[name]


def dataset_source(name: str) -> DatasetSource:
    return _lookup(dataset_sources(), "dataset source", name)


def eval_suite(name: str) -> EvalSuite:
    return _lookup(eval_suites(), "eval suite", name)


def verifier_backend(name: str) -> VerifierBackend:
    return _lookup(verifier_backends(), "verifier backend", name)


load_plugins()
