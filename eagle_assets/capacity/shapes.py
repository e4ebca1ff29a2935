"""Verifier shapes for capacity planning: what the disk and FLOP arithmetic needs from a config.

A shape comes from a Hugging Face ``config.json`` (a file or a model folder; a nested ``text_config``,
as Kimi-K2.5 has, is used when present) or from a preset. Reading the JSON directly keeps planning free
of ``trust_remote_code`` and of model downloads: Kimi-K2.5's config class lives in the model repo.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_assets.backends import VerifierBackend
from eagle_assets.tiny_verifier.recipe import DEFAULT_RECIPE

# Text configs of the presets (only the fields the arithmetic reads).
LLAMA_3_1_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
}
# Kimi-K2.5's text_config (DeepSeek-V3 architecture, Kimi-K2 sizes): MLA attention, 384 routed experts
# (8 per token) + 1 shared, the first layer dense. Default aux layers [2, 30, 58] + final 61.
KIMI_K2_5_TEXT = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 163840,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 262144,
}


class ShapeError(ValueError):
    """A verifier spec that is neither a preset nor a readable config; the message names the fix."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder's sizes, its captured layers, and its forward FLOPs per token."""

    name: str
    config: dict[str, Any]
    aux_layer_ids: tuple[int, ...]

    def _get(self, key: str, default: Any = None) -> Any:
        value = self.config.get(key, default)
        if value is None:
            raise ShapeError(f"verifier config {self.name} lacks {key!r}: pass a decoder config.json")
        return value

    @property
    def hidden_size(self) -> int:
        return int(self._get("hidden_size"))

    @property
    def num_layers(self) -> int:
        return int(self._get("num_hidden_layers"))

    @property
    def vocab_size(self) -> int:
        return int(self._get("vocab_size"))

    @property
    def layer_ids(self) -> list[int]:
        """Captured layers: the aux ids, then the final state ``n``."""
        return [*self.aux_layer_ids, self.num_layers]

    @property
    def heads(self) -> int:
        return int(self._get("num_attention_heads"))

    def _attention(self) -> tuple[int, int, int]:
        """(matmul parameters per layer, query-key dim, value dim) of all heads together."""
        h, heads = self.hidden_size, self.heads
        if self.config.get("kv_lora_rank"):  # MLA (DeepSeek-V3 / Kimi)
            qk = int(self._get("qk_nope_head_dim")) + int(self._get("qk_rope_head_dim"))
            v, kv_rank, rope = (
                int(self._get("v_head_dim")),
                int(self.config["kv_lora_rank"]),
                int(self.config["qk_rope_head_dim"]),
            )
            q_rank = self.config.get("q_lora_rank")
            q = h * q_rank + q_rank * heads * qk if q_rank else h * heads * qk
            params = q + h * (kv_rank + rope) + kv_rank * heads * (qk - rope + v) + heads * v * h
            return params, heads * qk, heads * v
        head_dim = int(self.config.get("head_dim") or h // heads)
        kv = int(self.config.get("num_key_value_heads") or heads)
        return h * heads * head_dim * 2 + 2 * h * kv * head_dim, heads * head_dim, heads * head_dim

    def active_matmul_params(self) -> int:
        """Weights one token multiplies through in the decoder layers (routed experts: only the chosen
        ones; embeddings and lm_head excluded, as in the extraction benchmark's bare decoder)."""
        h, layers = self.hidden_size, self.num_layers
        attention, _, _ = self._attention()
        dense_mlp = 3 * h * int(self._get("intermediate_size"))
        experts = self.config.get("n_routed_experts") or self.config.get("num_experts")
        if not experts:
            return layers * (attention + dense_mlp)
        dense_layers = int(self.config.get("first_k_dense_replace", 0))
        per_token = int(self._get("num_experts_per_tok")) + int(self.config.get("n_shared_experts") or 0)
        moe_mlp = per_token * 3 * h * int(self._get("moe_intermediate_size")) + h * int(experts)  # + router
        return layers * attention + dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp

    def forward_flops_per_token(self, context: float) -> float:
        """2 FLOPs per active weight, plus causal attention over rows of ``context`` tokens (a token
        attends to context/2 positions on average): 14.5 GFLOP for Llama-3.1-8B at 2048."""
        _, qk, v = self._attention()
        return 2 * self.active_matmul_params() + 2 * self.num_layers * (qk + v) * context / 2

    def draft_params(self, draft_vocab: int) -> int:
        """Trained weights of a one-layer EAGLE-3 draft: fc 3H->H, a Llama layer whose q/k/v read 2H
        inputs, and the draft lm_head (the frozen embedding excluded)."""
        h, heads = self.hidden_size, self.heads
        head_dim = h // heads
        kv = int(self.config.get("num_key_value_heads") or heads)
        layer = 2 * h * (heads + 2 * kv) * head_dim + heads * head_dim * h + 3 * h * int(self._get("intermediate_size"))
        return 3 * h * h + layer + draft_vocab * h

    def draft_train_flops_per_token(self, draft_vocab: int, ttt_steps: int = 3) -> float:
        """Forward + backward (6 FLOPs per weight) of the draft, unrolled over ``ttt_steps``; its
        attention over the row left out."""
        return 6.0 * ttt_steps * self.draft_params(draft_vocab)


def shape_of(name: str, text_config, layer_ids: list[int]) -> ModelShape:
    """The shape of a loaded verifier: a backend's ``text_config`` and its captured layer ids."""
    return ModelShape(name=name, config=text_config.to_dict(), aux_layer_ids=tuple(layer_ids[:-1]))


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """The transformers backend's default aux layers for a verifier of ``num_layers``."""
    return VerifierBackend(name="plan", description="").default_aux_layer_ids(num_layers)


def _tiny_config() -> dict[str, Any]:
    """The embedded tiny verifier's shape from its recipe (no build needed)."""
    r = DEFAULT_RECIPE
    vocab = -(-r.vocab_size // r.model_vocab_multiple) * r.model_vocab_multiple
    return {
        "model_type": "qwen3",
        "hidden_size": r.hidden_size,
        "num_hidden_layers": r.num_hidden_layers,
        "vocab_size": vocab,
        "intermediate_size": r.intermediate_size,
        "num_attention_heads": r.num_attention_heads,
        "num_key_value_heads": r.num_key_value_heads,
        "head_dim": r.head_dim,
        "max_position_embeddings": r.max_position_embeddings,
    }


PRESETS = {
    "tiny": "the embedded tiny verifier (eagle-assets tiny-verifier)",
    "llama-3.1-8b": "Llama-3.1-8B shape (hidden 4096, 32 layers, vocab 128256)",
    "kimi-k2.5": "Kimi-K2.5 text model (hidden 7168, 61 layers, vocab 163840, aux [2, 30, 58] + 61)",
}


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    nested = raw.get("text_config")
    return nested if isinstance(nested, dict) else raw


def load_shape(spec: str, aux_layer_ids: list[int] | None = None) -> ModelShape:
    """A preset name (:data:`PRESETS`) or a path to a ``config.json`` / model folder."""
    if spec in PRESETS:
        config = {"tiny": _tiny_config, "llama-3.1-8b": lambda: LLAMA_3_1_8B, "kimi-k2.5": lambda: KIMI_K2_5_TEXT}[
            spec
        ]()
        name = spec
    else:
        path = Path(spec).expanduser()
        path = path / "config.json" if path.is_dir() else path
        if not path.is_file():
            raise ShapeError(
                f"verifier {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a config.json "
                "or model folder: pass one of those"
            )
        try:
            config = _text_config(json.loads(path.read_text()))
        except ValueError as exc:
            raise ShapeError(f"{path} is not valid JSON ({exc})") from None
        name = str(path)
    shape = ModelShape(name=name, config=dict(config), aux_layer_ids=())
    aux = aux_layer_ids or default_aux_layer_ids(shape.num_layers)
    return ModelShape(name=name, config=dict(config), aux_layer_ids=tuple(aux))
