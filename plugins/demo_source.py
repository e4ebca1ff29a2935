"""Built-in source ``demo``: a bundled prompt set that works offline.

About 640 arithmetic questions phrased like the embedded tiny verifier's training data (their
original answers are terse "textbook" answers, a style unlike the verifier's worked solutions) and
about 80 general-chat conversations with short human-written answers, some multi-turn and some with
a system prompt. ``scripts/make_demo_prompts.py`` generated the file; it is committed, not rebuilt.
"""

from __future__ import annotations

from importlib.resources import files

from eagle_assets import hookimpl
from eagle_assets.plugins.local_files import JsonlSource

DEMO_FILE = files("eagle_assets.plugins") / "data" / "demo_prompts.jsonl"


@hookimpl
def register_dataset_sources(register):
    register(
        JsonlSource(
            name="demo",
            description="Bundled offline demo: arithmetic questions and general chat, with original answers",
            default_location=str(DEMO_FILE),
        )
    )
