"""The hooks a plugin implements. Built-in plugins go through these same hooks.

A plugin is a module (or an installed package with an ``eagle_assets`` entry point) holding
functions decorated with :data:`hookimpl`::

    from eagle_assets import hookimpl
    from eagle_assets.sources import DatasetSource

    @hookimpl
    def register_dataset_sources(register):
        register(MySource())
"""

import pluggy

hookspec = pluggy.HookspecMarker("eagle_assets")
hookimpl = pluggy.HookimplMarker("eagle_assets")


@hookspec
def register_dataset_sources(register):
    """Register prompt datasets.

    Call ``register(source)`` once per :class:`eagle_assets.sources.DatasetSource`. Each source
    becomes one partition of the ``prompts`` asset (and of the assets downstream of it), so its
    ``name`` must be unique and stable.
    """


@hookspec
def register_eval_suites(register):
    """Register evaluation suites.

    Call ``register(suite)`` once per :class:`eagle_assets.suites.EvalSuite`. ``eagle3_eval`` measures the
    suites its ``suites`` setting names, by ``name`` (unique and stable), and records each one's name and
    version in its report.
    """


@hookspec
def register_verifier_backends(register):
    """Register verifier backends.

    Call ``register(backend)`` once per :class:`eagle_assets.backends.VerifierBackend`. A backend owns
    everything model-family specific: tokenizer and chat template, reasoning-parser name, default
    EAGLE-3 auxiliary layer ids, where the text config and embedding / lm_head weights live, and
    hidden-state extraction.
    """
