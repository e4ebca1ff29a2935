"""What ``eagle-assets plugins`` shows: plugins, hooks, sources, backends, load failures."""

from __future__ import annotations

from eagle_assets.plugin_manager import (
    dataset_source_registrations,
    load_errors,
    origin,
    pm,
    verifier_backend_registrations,
)


def _describe(registrations: dict) -> list[dict]:
    return [
        {"name": name, "description": obj.description, "version": obj.version, "plugin": plugin}
        for name, (obj, plugin) in registrations.items()
    ]


def plugin_report() -> dict:
    """Everything the plugin manager knows, as plain JSON-able data."""
    sources = _describe(dataset_source_registrations())
    backends = _describe(verifier_backend_registrations())
    plugins = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        where = origin(name)
        plugins.append(
            {
                "name": name,
                "origin": where.kind,
                "version": where.version,
                "hooks": sorted(h.name for h in pm.get_hookcallers(plugin) or []),
                "dataset_sources": [s["name"] for s in sources if s["plugin"] == name],
                "verifier_backends": [b["name"] for b in backends if b["plugin"] == name],
            }
        )
    return {
        "plugins": plugins,
        "dataset_sources": sources,
        "verifier_backends": backends,
        # Read last: calling the hooks above may have recorded a plugin whose hook raised.
        "load_errors": [{"plugin": e.plugin, "error": e.error} for e in load_errors],
    }
