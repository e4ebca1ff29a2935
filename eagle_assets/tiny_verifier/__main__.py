"""``python -m eagle_assets.tiny_verifier OUT_DIR KIND RECIPE_JSON``: one build, as the cache's child process."""

import json
import sys
from pathlib import Path

from eagle_assets.tiny_verifier.build import build_tiny_verifier
from eagle_assets.tiny_verifier.recipe import RECIPES

build_tiny_verifier(
    Path(sys.argv[1]), RECIPES[sys.argv[2]](**json.loads(sys.argv[3])), log=lambda line: print(line, flush=True)
)
