"""Packed rows that end where their samples end: speculators' rows without the padding, the same training
step, and a recompile limit that covers their lengths (FP8 rows: test_device_batches.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.synthetic import training_sample

HIDDEN = 64


def test_rows_end_where_their_samples_end_and_are_speculators_rows_without_the_padding():
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import ROW_BUCKET, RowEndCollate

    torch.manual_seed(0)
    row = 3 * ROW_BUCKET
    cases = (([700, 900], 2048), ([1024], 1024), ([1025], 1024), ([2000, 1100], row), ([0], 1024), ([300], 1024))
    for lengths, kept in cases:
        samples = [training_sample(n, HIDDEN) for n in lengths]
        theirs = CollateFn(row, HIDDEN, 3, dtype=torch.float32, preprocess=shift_batch)([dict(s) for s in samples])
        ours = RowEndCollate(row, HIDDEN, 3, dtype=torch.float32, preprocess=shift_batch)([dict(s) for s in samples])
        assert set(ours) == set(theirs) and ours["error_records"] == theirs["error_records"]
        for key, want in theirs.items():
            if not isinstance(want, torch.Tensor):
                continue
            got = ours[key]
            assert got.shape[1] == kept and kept % ROW_BUCKET == 0, (lengths, key)
            assert got.dtype == want.dtype and torch.equal(got, want[:, :kept]), key
            # What was cut is padding only.
            rest = want[:, kept:]
            assert torch.equal(rest, torch.full_like(rest, -1 if key == "document_ids" else 0)), key
    # A row no longer than one bucket, or not a whole number of them: cut only to whole buckets below it.
    assert (
        RowEndCollate(512, HIDDEN, 3, preprocess=shift_batch)([training_sample(100, HIDDEN)])["input_ids"].shape[1]
        == 512
    )
    collate = RowEndCollate(ROW_BUCKET + 500, HIDDEN, 3, dtype=torch.float32, preprocess=shift_batch)
    assert collate([training_sample(100, HIDDEN)])["input_ids"].shape[1] == ROW_BUCKET
    assert collate([training_sample(1200, HIDDEN)])["input_ids"].shape[1] == ROW_BUCKET + 500


def test_the_recompile_limit_covers_every_row_length_per_ttt_step():
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import ROW_BUCKET, recompiles_for_rows

    # 9 lengths and a spare, each once per KV-cache layout of 3 ttt steps and the empty cache, with and
    # without grad.
    assert recompiles_for_rows(9 * ROW_BUCKET, 3) == 80
    assert recompiles_for_rows(9 * ROW_BUCKET + 1, 1) == 44


def test_a_cut_row_trains_the_draft_exactly_as_the_padded_row():
    """Same loss, gradients and metrics with and without the padding: speculators' loss is a masked mean
    and padding attends to nothing."""
    from speculators.losses.eager import kl_div_loss
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import trim_padding
    from tests.helpers.drafts import eagle3_draft, llama_layer

    layer = llama_layer(300, HIDDEN, head_dim=32, intermediate_size=128, max_positions=2048)
    torch.manual_seed(0)
    draft = eagle3_draft(layer, 300, "LlamaForCausalLM")
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.normal_(0, 0.5 if parameter.dim() == 2 and parameter.shape[0] == 300 else 0.05)
    padded = CollateFn(3072, HIDDEN, 3, dtype=torch.float32, preprocess=shift_batch)(
        [training_sample(300, HIDDEN), training_sample(400, HIDDEN)]
    )
    cut = trim_padding(padded, 3072)
    assert cut["input_ids"].shape[1] == 1024

    def step(batch):
        draft.zero_grad()
        inputs = {key: value for key, value in batch.items() if key != "error_records"}
        _, loss, metrics = draft(**inputs, ttt_steps=3, loss_config={"kl_div": (kl_div_loss, 1.0)})
        loss.backward()
        grads = {name: p.grad.clone() for name, p in draft.named_parameters() if p.grad is not None}
        return loss.detach(), grads, {key: value.item() for key, value in metrics.items()}

    loss_padded, grads_padded, metrics_padded = step(padded)
    loss_cut, grads_cut, metrics_cut = step(cut)
    assert loss_padded.item() > 0.1
    torch.testing.assert_close(loss_cut, loss_padded, rtol=1e-5, atol=0)
    assert grads_cut.keys() == grads_padded.keys() and grads_cut
    for name, grad in grads_padded.items():
        torch.testing.assert_close(grads_cut[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert metrics_cut.keys() == metrics_padded.keys()
    for key, value in metrics_padded.items():
        assert metrics_cut[key] == pytest.approx(value, rel=1e-5), key
