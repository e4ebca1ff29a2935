"""The draft vocabulary, from the supervised-token counts of the training folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eagle_assets.eagle3_checkpoint.vocab import DraftVocabError, build_draft_vocab


def test_draft_vocab_from_frequencies(tmp_path):
    torch.save({7: 50, 3: 40, 9: 30, 1: 1}, tmp_path / "token_freq.pt")
    vocab = build_draft_vocab(tmp_path, 3, 16)
    d2t, t2d = np.load(vocab.d2t_path), np.load(vocab.t2d_path)
    assert (np.arange(3) + d2t).tolist() == [3, 7, 9]  # the three most frequent, in id order
    assert t2d.shape == (16,) and np.nonzero(t2d)[0].tolist() == [3, 7, 9]
    assert vocab.coverage == pytest.approx(120 / 121)
    for too_large in (17, 16):  # the whole vocabulary too: vLLM loads d2t/t2d only for a smaller draft vocabulary
        with pytest.raises(DraftVocabError, match="between 1 and 15, below the verifier's vocab size 16"):
            build_draft_vocab(tmp_path, too_large, 16)
    torch.save({20: 5}, tmp_path / "token_freq.pt")
    with pytest.raises(DraftVocabError, match="outside the verifier vocabulary"):
        build_draft_vocab(tmp_path, 3, 16)
    (tmp_path / "token_freq.pt").unlink()
    with pytest.raises(DraftVocabError, match=r"token_freq.pt is missing"):
        build_draft_vocab(tmp_path, 3, 16)
