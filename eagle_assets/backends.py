"""The verifier-backend contract: what a plugin registers through ``register_verifier_backends``.

A backend owns everything specific to a model family. The ``token_sequences`` and ``hidden_states``
assets and the training step only talk to a verifier through this class: its tokenizer and chat
template, the reasoning-parser name the server needs, where the text config and the embedding /
lm_head weights live, the default EAGLE-3 auxiliary layers, and hidden-state extraction.

Layer ids follow vLLM's and speculators' convention: id ``k`` is the residual stream after ``k``
decoder layers (0 = the embeddings); id ``n`` (the number of layers) is the final state *before* the
final norm. A capture is the auxiliary ids followed by ``n``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

# Files at most this large are hashed whole for the verifier identity; larger weight shards are
# identified by name, size and their first and last megabyte (hashing 600 GB would take an hour).
FULL_HASH_LIMIT = 64 << 20
EDGE_BYTES = 1 << 20
IDENTITY_FILES = ("*.json", "*.jinja", "*.model", "*.tiktoken", "*.safetensors", "*.bin", "*.py")


@dataclass(frozen=True)
class SampleTensors:
    """One extracted sample: ``hidden_states`` [seq, n_layers, H] and ``token_ids`` [seq] (torch).

    ``hidden_states`` is bf16, or, when the backend quantized it already (``ExtractionRequest.feature_dtype``
    fp8), float8_e4m3fn with ``scales`` fp32 [seq, 1, 1] (hs-connectors' format)."""

    key: Any
    hidden_states: Any
    token_ids: Any
    scales: Any = None


# The sink an extraction calls once per sample, possibly from several threads at once. When it
# returns, the backend may reuse the memory behind ``hidden_states``: copy or write it before then.
Sink = Callable[[SampleTensors], None]


@dataclass(frozen=True)
class ExtractionRequest:
    """What to extract: ``sequences`` is an iterable of (key, input_ids); ``layer_ids`` aux + final."""

    sequences: Sequence[tuple[Any, Sequence[int]]]
    layer_ids: Sequence[int]
    device: str = "cpu"
    dtype: str = "auto"
    batch_tokens: int = 16384
    # A folder on the output's disk for a backend whose engine writes its own files first (vLLM's
    # connector); the backend owns it: emptied when it starts, removed when it ends. "" = none given.
    scratch_dir: str = ""
    # The storage dtype the sink writes ("bfloat16" or "fp8"). A backend may quantize to fp8 itself
    # (less to copy off the GPU) and hand over e4m3 states + scales; otherwise the sink quantizes.
    feature_dtype: str = "bfloat16"
    # Engine keyword arguments from the verifier resource, for a backend that builds an engine (vLLM's
    # ``EngineArgs``); a backend without one ignores them.
    engine_args: Mapping[str, Any] = field(default_factory=dict)


def _edge_hash(path: Path) -> str:
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        if size <= FULL_HASH_LIMIT:
            while chunk := fh.read(EDGE_BYTES):
                digest.update(chunk)
        else:
            digest.update(fh.read(EDGE_BYTES))
            fh.seek(size - EDGE_BYTES)
            digest.update(fh.read(EDGE_BYTES))
    return digest.hexdigest()


@lru_cache(maxsize=32)
def _folder_identity(folder: str, mtimes: tuple) -> str:
    digest = hashlib.sha256()
    for name, _mtime in mtimes:
        digest.update(name.encode())
        digest.update(_edge_hash(Path(folder) / name).encode())
    return digest.hexdigest()[:16]


def verifier_identity(model_path: str | Path) -> str:
    """A short content id of a verifier folder: config, tokenizer, template and weights.

    Recomputed only when a file's modification time changes (cached per process).
    """
    folder = Path(model_path)
    files = sorted({p for pattern in IDENTITY_FILES for p in folder.glob(pattern) if p.is_file()})
    if not files:
        raise FileNotFoundError(f"verifier folder {folder} holds no config, tokenizer or weights")
    return _folder_identity(str(folder), tuple((p.name, p.stat().st_mtime_ns) for p in files))


def spread_layer_ids(num_layers: int, count: int = 3) -> list[int]:
    """``count`` distinct ids spread evenly over 1..n-1 (fewer when the model has fewer layers)."""
    inner = list(range(1, num_layers))
    if len(inner) <= count:
        return inner
    return sorted({inner[round(i * (len(inner) - 1) / (count - 1))] for i in range(count)})


@dataclass
class VerifierBackend:
    """A way to read a verifier's configuration and extract its hidden states.

    Subclasses override what differs for their model family; :meth:`extract` is the one method a
    backend must implement to be usable by the ``hidden_states`` asset.
    """

    name: str
    description: str
    version: str = "1"
    reasoning_parser: str = "qwen3"
    trust_remote_code: bool = False
    # The assistant-message field the chat template reads the thinking from.
    reasoning_field: str = "reasoning_content"
    # True when extraction loads the whole verifier on the one device it is given, so the
    # ``hidden_states`` asset may run one worker process per GPU (``Verifier.devices``).
    data_parallel: bool = False

    # ---- configuration -------------------------------------------------------------------------
    def load_config(self, model_path: str | Path):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(model_path), trust_remote_code=self.trust_remote_code)

    def text_config(self, model_path: str | Path):
        """The decoder's config: the top-level one, or the nested ``text_config`` of multimodal models."""
        config = self.load_config(model_path)
        nested = getattr(config, "text_config", None)
        if nested is not None:
            if isinstance(nested, dict):
                from transformers import PretrainedConfig

                nested = PretrainedConfig.from_dict(nested)
            return nested
        return config

    def num_layers(self, model_path: str | Path) -> int:
        return int(self.text_config(model_path).num_hidden_layers)

    def hidden_size(self, model_path: str | Path) -> int:
        return int(self.text_config(model_path).hidden_size)

    def vocab_size(self, model_path: str | Path) -> int:
        return int(self.text_config(model_path).vocab_size)

    def default_aux_layer_ids(self, num_layers: int) -> list[int]:
        """EAGLE-3's ``[2, n//2, n-3]``; on tiny models where those collide or fall outside
        1..n-1, up to three distinct ids spread evenly instead."""
        ids = [2, num_layers // 2, num_layers - 3]
        if len(set(ids)) == len(ids) and all(1 <= i < num_layers for i in ids):
            return ids
        return spread_layer_ids(num_layers)

    def capture_layer_ids(self, model_path: str | Path, aux_layer_ids: Sequence[int] | None = None) -> list[int]:
        """Aux ids (given or default) followed by the final id ``n``, validated."""
        n = self.num_layers(model_path)
        aux = list(aux_layer_ids) if aux_layer_ids else self.default_aux_layer_ids(n)
        bad = [i for i in aux if not 0 <= i < n]
        if bad or len(set(aux)) != len(aux):
            raise ValueError(
                f"aux_layer_ids {aux} are invalid for a verifier with {n} layers: they must be distinct "
                f"and within 0..{n - 1} (the final state, id {n}, is always captured last). "
                f"Leave aux_layer_ids empty for the default {self.default_aux_layer_ids(n)}."
            )
        return [*aux, n]

    def weight_names(self, model_path: str | Path) -> list[str]:
        """Tensor names in the checkpoint (from the safetensors index or the files' headers)."""
        folder = Path(model_path)
        index = folder / "model.safetensors.index.json"
        if index.exists():
            return sorted(json.loads(index.read_text())["weight_map"])
        from safetensors import safe_open

        names: list[str] = []
        for shard in sorted(folder.glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as fh:
                names += list(fh.keys())
        return sorted(names)

    def _weight_named(self, model_path: str | Path, suffix: str) -> str | None:
        matches = [n for n in self.weight_names(model_path) if n == suffix or n.endswith("." + suffix)]
        # The shortest match is the language model's own (a vision tower may carry a longer twin).
        return min(matches, key=len) if matches else None

    def embedding_weight_name(self, model_path: str | Path) -> str:
        name = self._weight_named(model_path, "embed_tokens.weight")
        if name is None:
            raise KeyError(f"no '*embed_tokens.weight' tensor in {model_path}; is this a decoder checkpoint?")
        return name

    def lm_head_weight_name(self, model_path: str | Path) -> str:
        """The output projection; tied models reuse the embedding."""
        return self._weight_named(model_path, "lm_head.weight") or self.embedding_weight_name(model_path)

    def identity(self, model_path: str | Path) -> str:
        return verifier_identity(model_path)

    # ---- tokenizer and chat template -----------------------------------------------------------
    def load_tokenizer(self, model_path: str | Path):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_path), trust_remote_code=self.trust_remote_code)

    def stop_token_ids(self, tokenizer, model_path: str | Path) -> set[int]:
        """Tokens that end a completion: the tokenizer's EOS and the generation config's."""
        ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        gen = Path(model_path) / "generation_config.json"
        if gen.exists():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        return ids

    def render(
        self,
        tokenizer,
        messages: list[dict],
        reasoning: str | None,
        content: str | None,
        stop_ids: Iterable[int] = (),
        template_kwargs: dict | None = None,
    ) -> tuple[list[int], list[int]]:
        """(prompt ids, completion ids) for a conversation and the verifier's reply, through the chat
        template: the prompt as the server renders it (with the generation prompt), the completion
        as what the template adds for the reply with its reasoning, up to the stop token (the
        template's own trailing text after it is never generated, so it is not trained on).
        ``template_kwargs``: the request's `chat_template_kwargs` (e.g. thinking off), as the server got them."""
        template_kwargs = template_kwargs or {}
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)
        reply = {"role": "assistant", "content": content or ""}
        if reasoning is not None:
            reply[self.reasoning_field] = reasoning
        full = tokenizer.apply_chat_template([*messages, reply], tokenize=False, **template_kwargs)
        if not full.startswith(prompt):
            raise ValueError(
                "the chat template renders the conversation differently with the reply appended, so the "
                f"reply cannot be located: prompt ends {prompt[-80:]!r}, "
                f"full text there {full[len(prompt) - 80 : len(prompt)]!r}"
            )
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        completion_ids = tokenizer.encode(full[len(prompt) :], add_special_tokens=False)
        stops = set(stop_ids)
        last_stop = max((i for i, t in enumerate(completion_ids) if t in stops), default=None)
        if last_stop is not None:
            completion_ids = completion_ids[: last_stop + 1]
        return prompt_ids, completion_ids

    # ---- extraction ----------------------------------------------------------------------------
    def extract(
        self,
        model_path: str | Path,
        request: ExtractionRequest,
        sink: Sink,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Run the verifier over ``request.sequences`` and call ``sink`` once per sample with
        ``hidden_states`` bf16 [seq, len(layer_ids), H] (layer order as given) and ``token_ids``
        int64 [seq]. ``progress(samples, tokens)`` reports what was handed to the sink so far."""
        raise NotImplementedError(f"verifier backend {self.name!r} cannot extract hidden states")

    def describe(self, model_path: str | Path) -> dict:
        """What lineage and manifests record about a verifier."""
        return {
            "backend": self.name,
            "backend_version": self.version,
            "model_path": str(model_path),
            "identity": self.identity(model_path),
            "num_layers": self.num_layers(model_path),
            "hidden_size": self.hidden_size(model_path),
            "vocab_size": self.vocab_size(model_path),
            "reasoning_parser": self.reasoning_parser,
            "embedding_weight": self.embedding_weight_name(model_path),
            "lm_head_weight": self.lm_head_weight_name(model_path),
        }
