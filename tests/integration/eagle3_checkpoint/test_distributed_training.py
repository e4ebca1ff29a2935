"""Training with torchrun: two ranks (DDP over gloo on CPU; NCCL on GPUs) on random features."""

from __future__ import annotations

import logging

from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.saved import load_with_speculators
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.vocab import build_draft_vocab
from tests.helpers.features import (
    PARTITIONS,
    VOCAB,
)


def test_two_training_processes_share_the_epoch_and_keep_one_loadable_checkpoint(random_features, tmp_path):
    """torchrun with two ranks (DDP over gloo on CPU; NCCL on GPUs): each rank trains on its part of
    every epoch, so an epoch takes fewer optimizer steps than in one process, and rank 0 keeps the
    best checkpoint."""
    root, verifier = random_features
    log = logging.getLogger(__name__)
    work = tmp_path / "work"
    data = build_training_data(root, PARTITIONS, work, log=log)
    vocab = build_draft_vocab(data.path, 64, VOCAB, log=log)
    runs = {}
    for processes in (1, 2):
        settings = TrainingSettings(
            epochs=1,
            draft_vocab_size=64,
            total_seq_len=256,
            lr=1e-3,
            num_processes=processes,
            early_stop_patience=0,
            log_every_steps=1,
        )
        runs[processes] = trainer.train(data, vocab, str(verifier), settings, work, log)
    assert runs[1].folder != runs[2].folder
    assert runs[2].summary["epochs_run"] == 1 and runs[2].summary["val_loss"] > 0
    assert 0 < runs[2].summary["train_steps"] < runs[1].summary["train_steps"]
    model = load_with_speculators(runs[2].best_dir)
    assert model.d2t.shape == (64,)
