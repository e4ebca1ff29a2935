"""Training batches of fp8 features dequantized after collate (on the GPU in training) equal speculators'
own fp8 path, which dequantizes each sample in its loader; and the training step's helpers: batches a step
ahead, the time spent waiting on the loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from tests.helpers.synthetic import write_head_only_verifier, write_random_features

HIDDEN, LAYERS, ROW = 64, [1, 2, 3, 4], 96


def fp8_training_data(tmp_path: Path):
    from transformers import Qwen3Config

    verifier = write_head_only_verifier(
        tmp_path / "verifier",
        Qwen3Config(
            vocab_size=256,
            hidden_size=HIDDEN,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            intermediate_size=128,
            max_position_embeddings=1024,
            eos_token_id=1,
        ),
    )
    write_random_features(
        tmp_path / "fp8",
        "demo",
        verifier_path=verifier,
        layer_ids=LAYERS,
        hidden_size=HIDDEN,
        vocab_size=256,
        num_rows=8,
        seq_len=(20, 40),
        feature_dtype="fp8",
    )
    return build_training_data(tmp_path / "fp8", ["demo"], tmp_path / "work")


def batches(dataset_class, collate_class, data, row: int = ROW):
    """Packed batches of ``row`` positions as speculators' loader builds them (its EAGLE-3 preprocessing
    included)."""
    from hs_connectors import FP8Backend
    from speculators.models.eagle3.data import shift_batch

    transfer = FP8Backend.from_train_args(type("Args", (), {"hidden_states_path": None})(), str(data.path))
    dataset = dataset_class(max_len=row, datapath=str(data.path), transfer=transfer, on_missing="raise")
    collate = collate_class(row, HIDDEN, num_target_layers=3, dtype=dataset.hidden_states_dtype, preprocess=shift_batch)
    packs = [[0, 1, 2], [3, 4], [5]]  # several samples per row, and a row cut short
    return dataset, [collate([dataset[i] for i in pack]) for pack in packs]


def test_fp8_batches_dequantized_after_collate_equal_speculators_dequantizing_per_sample(tmp_path):
    import torch
    from speculators.train.data import ArrowDataset, CollateFn

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import (
        DeviceBatches,
        Fp8OnDeviceDataset,
        ScalesKeptCollate,
        dequantize_features,
    )

    data = fp8_training_data(tmp_path)
    _, expected = batches(ArrowDataset, CollateFn, data)
    dataset, deferred = batches(Fp8OnDeviceDataset, ScalesKeptCollate, data)
    assert dataset.fp8_on_device and deferred[0]["hidden_states"].dtype == torch.float8_e4m3fn
    assert deferred[0]["hidden_states"].element_size() * 2 == expected[0]["hidden_states"].element_size()
    for want, got in zip(expected, deferred):
        got = dequantize_features(dict(got), dataset.dequantize_dtype)
        assert set(got) == set(want)
        for key in ("hidden_states", "verifier_last_hidden_states", "input_ids", "loss_mask", "document_ids"):
            assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
    # On CPU DeviceBatches only dequantizes: same batches again, through the loader interface.
    loader = DeviceBatches(deferred, torch.device("cpu"), dataset.dequantize_dtype)
    assert len(loader) == len(expected)
    for want, got in zip(expected, loader):
        assert torch.equal(got["hidden_states"], want["hidden_states"])


def test_bf16_samples_pass_through_unchanged(tmp_path):
    import torch
    from speculators.models.eagle3.data import shift_batch

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import ScalesFollowFeatures

    sample = {
        "input_ids": torch.arange(5),
        "hidden_states": torch.randn(5, 6),
        "loss_mask": torch.ones(5),
        "verifier_last_hidden_states": torch.randn(5, 2),
        "lengths": torch.tensor([5]),
        "position_ids": torch.arange(5),
    }
    out = ScalesFollowFeatures(shift_batch)(dict(sample))
    want = shift_batch(dict(sample))
    assert set(out) == set(want) and all(torch.equal(out[k], want[k]) for k in want)


def test_scalar_metrics_are_built_on_the_device_without_a_blocking_copy():
    import torch

    from eagle_assets.eagle3_checkpoint.trainer_process import host_syncs

    host_syncs.install()
    from speculators.train import trainer

    # On CPU the patched constructor must equal torch's own, dtype inference included.
    for value, dtype in ((3, torch.float32), (1.0, None), (2, None), (True, None)):
        got, want = trainer.torch.tensor(value, dtype=dtype), torch.tensor(value, dtype=dtype)
        assert got.dtype == want.dtype and got.item() == want.item()
    assert trainer.torch.autocast is torch.autocast and trainer.torch.Tensor is torch.Tensor


def test_a_generated_fp8_row_is_checked_like_a_bf16_one():
    """speculators' check of a row the online server made, on FP8 values (torch has no CPU min/max of FP8)."""
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import check_generated

    states = torch.ones(3, 2, 4).to(torch.float8_e4m3fn)
    check_generated({"hidden_states": states, "token_ids": torch.tensor([5, 6, 7])}, [5, 6, 7])
    assert states.dtype == torch.float8_e4m3fn  # the row itself stays FP8
    broken = states.clone()
    broken[1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        check_generated({"hidden_states": broken, "token_ids": torch.tensor([5, 6, 7])}, [5, 6, 7])
    with pytest.raises(ValueError, match="Token ids don't match"):
        check_generated({"hidden_states": states, "token_ids": torch.tensor([5, 6, 8])}, [5, 6, 7])


def test_cut_fp8_rows_keep_their_scales_beside_their_features(tmp_path):
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import (
        ROW_BUCKET,
        Fp8OnDeviceDataset,
        RowEndCollate,
        ScalesKeptCollate,
        dequantize_features,
    )

    data = fp8_training_data(tmp_path)
    dataset, padded = batches(Fp8OnDeviceDataset, ScalesKeptCollate, data, row=2 * ROW_BUCKET)
    _, cut = batches(Fp8OnDeviceDataset, RowEndCollate, data, row=2 * ROW_BUCKET)
    for full, short in zip(padded, cut):
        assert short["hidden_states"].dtype == torch.float8_e4m3fn and short["hidden_states"].shape[1] == ROW_BUCKET
        full = dequantize_features(dict(full), dataset.dequantize_dtype)
        short = dequantize_features(dict(short), dataset.dequantize_dtype)
        for key in ("hidden_states", "verifier_last_hidden_states", "input_ids", "loss_mask", "document_ids"):
            assert torch.equal(short[key], full[key][:, :ROW_BUCKET]), key


def test_each_epoch_counts_the_time_it_waited_on_the_loader():
    import time

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import DeviceBatches

    class SlowLoader:
        def __init__(self, delays):
            self.delays = delays

        def __len__(self):
            return len(self.delays)

        def __iter__(self):
            for row, delay in enumerate(self.delays):
                time.sleep(delay)
                yield {"row": torch.tensor([row])}

    batches = DeviceBatches(SlowLoader([0.2, 0.0, 0.1]), torch.device("cpu"))
    assert [batch["row"].item() for batch in batches] == [0, 1, 2]
    wait = batches.wait
    assert wait.batches == 3 and 0.2 <= wait.first_batch_s < 0.3 and 0.3 <= wait.seconds < 0.45
    assert (
        wait.line(2)
        == f"epoch 2 loader: 3 batches, {wait.seconds:.2f}s waiting for them ({wait.first_batch_s:.2f}s for the first)"
    )
    list(batches)  # the next epoch's count starts from nothing
    assert batches.wait.batches == 3 and batches.wait.seconds < 0.45
