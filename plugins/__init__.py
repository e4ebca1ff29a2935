"""Built-in plugins (installed as ``eagle_assets.plugins``): dataset sources and verifier backends.

They register through the same hooks as third-party plugins; see ``eagle_assets.hookspecs``.
"""
