"""An installable eagle-assets plugin: ``pip install examples/plugin_package`` adds the ``trivia`` source.

The bundled rows are JSON lines in ShareGPT shape, so the built-in JSONL reader does the work; a plugin
only has to say where its data lives.
"""

from importlib.resources import files

from eagle_assets import hookimpl
from eagle_assets.plugins.local_files import JsonlSource


@hookimpl
def register_dataset_sources(register):
    register(
        JsonlSource(
            name="trivia",
            description="Example plugin package: a few trivia questions (ShareGPT shape)",
            default_location=str(files(__name__) / "trivia.jsonl"),
        )
    )
