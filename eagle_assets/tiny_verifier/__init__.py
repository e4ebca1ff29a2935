"""The embedded default verifier: a tiny Qwen3 reasoning model the project builds and caches itself.

No model can be downloaded here, so the demo's verifier is built from scratch: a byte-level BPE
tokenizer trained on the task text, a Qwen3-style chat template with ``<think>``/``</think>``, and a
few hundred CPU steps on step-by-step arithmetic (plus short fixed-style replies to any other prompt),
so that it really writes thinking, ``</think>``, an answer and ``<|im_end|>``.
"""

from eagle_assets.tiny_verifier.build import build_tiny_verifier
from eagle_assets.tiny_verifier.cache import cached_tiny_verifier, default_cache_dir
from eagle_assets.tiny_verifier.recipe import DEFAULT_RECIPE, TinyVerifierRecipe, recipe_hash

__all__ = [
    "DEFAULT_RECIPE",
    "TinyVerifierRecipe",
    "build_tiny_verifier",
    "cached_tiny_verifier",
    "default_cache_dir",
    "recipe_hash",
]
