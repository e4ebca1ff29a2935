"""The draft vocabulary: the verifier tokens the draft may propose, chosen by supervised-token frequency.

speculators builds ``d2t`` (draft index -> offset to the verifier id) and ``t2d`` (a boolean mask over
the verifier vocabulary) from ``token_freq.pt``, but when that file is missing it silently trains a
full-vocabulary draft instead of the requested size. Here the maps are built explicitly with
speculators' own ``build_vocab_mappings_from_distribution`` and passed as ``--d2t-path``/``--t2d-path``,
so a missing or empty frequency file is an error, never a silent fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eagle_assets.core.files import atomic_path


class DraftVocabError(ValueError):
    """The draft vocabulary cannot be built as asked."""


@dataclass(frozen=True)
class DraftVocab:
    d2t_path: Path
    t2d_path: Path
    size: int
    distinct_supervised_tokens: int
    coverage: float  # fraction of supervised tokens inside the draft vocabulary
    # Share of the most frequent supervised token: the accuracy a draft reaches by always proposing it,
    # having learned nothing from the verifier's states (the floor a trained draft must clear).
    top_token_share: float


def load_token_frequencies(data_dir: Path) -> dict[int, int]:
    import torch

    path = Path(data_dir) / "token_freq.pt"
    if not path.exists():
        raise DraftVocabError(
            f"{path} is missing: the draft vocabulary is chosen from supervised-token frequencies; "
            "rebuild the training data folder (eagle_assets.eagle3_checkpoint.training_data.build_training_data)"
        )
    freqs = torch.load(path, weights_only=True)
    if not freqs:
        raise DraftVocabError(f"{path} counts no supervised tokens: the training rows have no loss-mask-1 tokens")
    return {int(k): int(v) for k, v in freqs.items()}


def build_draft_vocab(data_dir: Path, draft_vocab_size: int, target_vocab_size: int, log=None) -> DraftVocab:
    """Write ``d2t-<size>.npy`` and ``t2d-<size>.npy`` into ``data_dir`` from its token frequencies."""
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    # Not equal either: vLLM's EAGLE-3 draft (llama_eagle3.py) has a d2t parameter only when its vocabulary
    # is smaller than the verifier's, and refuses to load a checkpoint that carries d2t/t2d otherwise.
    if not 0 < draft_vocab_size < target_vocab_size:
        raise DraftVocabError(
            f"draft_vocab_size={draft_vocab_size} must be between 1 and {target_vocab_size - 1}, below the "
            f"verifier's vocab size {target_vocab_size} (vLLM cannot load a draft with the whole vocabulary "
            "and d2t/t2d maps); set eagle3_checkpoint's draft_vocab_size lower, or leave it unset"
        )
    freqs = load_token_frequencies(data_dir)
    out_of_range = [t for t in freqs if not 0 <= t < target_vocab_size]
    if out_of_range:
        raise DraftVocabError(
            f"token ids {out_of_range[:5]} are outside the verifier vocabulary (size {target_vocab_size}): "
            "the features were made with another tokenizer; re-materialize token_sequences"
        )
    d2t, t2d = build_vocab_mappings_from_distribution(freqs, draft_vocab_size, target_vocab_size)
    chosen = set((np.arange(draft_vocab_size) + d2t.numpy()).tolist())
    total = sum(freqs.values())
    coverage = sum(c for t, c in freqs.items() if t in chosen) / total
    if len(freqs) < draft_vocab_size and log:
        log.warning(
            f"only {len(freqs)} distinct supervised tokens for a draft vocabulary of {draft_vocab_size}: "
            "speculators fills the rest with the lowest unused token ids"
        )
    paths = []
    for name, array in (("d2t", d2t.numpy()), ("t2d", t2d.numpy())):
        final = Path(data_dir) / f"{name}-{draft_vocab_size}.npy"
        with atomic_path(final) as tmp, open(tmp, "wb") as fh:
            np.save(fh, array)
        paths.append(final)
    return DraftVocab(paths[0], paths[1], draft_vocab_size, len(freqs), coverage, max(freqs.values()) / total)
