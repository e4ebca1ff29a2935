"""What ``eagle-assets plugins`` shows: plugins, hooks, sources, backends, load failures."""

from __future__ import annotations

import importlib.metadata

from eagle_assets.plugin_manager import dataset_sources, load_errors, pm, verifier_backends


def _distribution_version(plugin_name: str) -> str | None:
    for dist, ep_name in ((d, ep.name) for d in importlib.metadata.distributions() for ep in d.entry_points):
        if ep_name == plugin_name:
            return dist.version
    return None


def plugin_report() -> dict:
    plugins = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        version = None if name.startswith("eagle_assets.") else _distribution_version(name)
        plugins.append({"name": name, "hooks": hooks, "version": version})
    return {
        "plugins": plugins,
        "dataset_sources": [
            {"name": s.name, "description": s.description, "version": s.version}
            for s in dataset_sources().values()
        ],
        "verifier_backends": [
            {"name": b.name, "description": b.description, "version": b.version}
            for b in verifier_backends().values()
        ],
        "load_errors": [{"plugin": e.plugin, "error": e.error} for e in load_errors],
    }
