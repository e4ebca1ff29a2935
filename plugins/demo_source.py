"""Built-in sources ``demo`` and ``demo_ood``: bundled prompt sets that work offline.

``demo``: about 640 arithmetic questions phrased like the embedded tiny verifier's training data
(their original answers are terse "textbook" answers, a style unlike the verifier's worked solutions;
each row names its problem as ``group``, so a problem worded two ways stays in one split) and about
80 general-chat conversations with short human-written answers, some multi-turn and some with a
system prompt.

``demo_ood``: an evaluation-only, out-of-distribution set -- arithmetic worded unlike the training
prompts, with larger operands and mostly with a system prompt. Every row is ``heldout``;
``eagle3_eval`` reports its acceptance beside the in-distribution held-out one.

``scripts/make_demo_prompts.py`` generated both files; they are committed, not rebuilt.
"""

from __future__ import annotations

from importlib.resources import files

from eagle_assets import hookimpl
from eagle_assets.plugins.local_files import JsonlSource

DATA = files("eagle_assets.plugins") / "data"
DEMO_FILE = DATA / "demo_prompts.jsonl"
DEMO_OOD_FILE = DATA / "demo_ood_prompts.jsonl"


@hookimpl
def register_dataset_sources(register):
    register(
        JsonlSource(
            name="demo",
            description="Bundled offline demo: arithmetic questions and general chat, with original answers",
            default_location=str(DEMO_FILE),
        )
    )
    register(
        JsonlSource(
            name="demo_ood",
            description="Bundled out-of-distribution eval set: arithmetic worded otherwise, larger operands, "
            "system prompts (evaluation only)",
            default_location=str(DEMO_OOD_FILE),
            evaluation_only=True,
        )
    )
