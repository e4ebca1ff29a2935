"""FP8 hidden states in the training folder: speculators' fp8 reader, and no mixing of dtypes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_assets.core.layout import current_folder
from eagle_assets.eagle3_checkpoint.feature_manifest import TrainingDataError
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from tests.helpers.synthetic import write_head_only_verifier, write_random_features

HIDDEN, LAYERS = 64, [1, 2, 3, 4]


def head_only_verifier(folder: Path) -> Path:
    from transformers import Qwen3Config

    return write_head_only_verifier(
        folder,
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


def test_fp8_training_folder_reads_back_through_speculators_and_never_mixes_dtypes(tmp_path):
    """Same rows in bf16 and fp8: separate training folders; speculators' fp8 backend dequantizes
    them close to the bf16 states; a file whose dtype disagrees with the manifest is refused."""
    import torch
    from hs_connectors import HiddenStatesBackend
    from speculators.train.data import ArrowDataset

    from eagle_assets.hidden_states.files import TRAINER_BACKENDS

    verifier = head_only_verifier(tmp_path / "verifier")
    built = {}
    for dtype in ("bfloat16", "fp8"):
        root = tmp_path / dtype
        write_random_features(
            root,
            "demo",
            verifier_path=verifier,
            layer_ids=LAYERS,
            hidden_size=HIDDEN,
            vocab_size=256,
            num_rows=6,
            seq_len=(20, 40),
            feature_dtype=dtype,
        )
        built[dtype] = build_training_data(root, ["demo"], tmp_path / "work")
    assert built["bfloat16"].path != built["fp8"].path  # the dtype is part of the folder's content hash
    loaded = {}
    for dtype, data in built.items():
        transfer = HiddenStatesBackend.registry[TRAINER_BACKENDS[dtype]].from_train_args(
            type("Args", (), {"hidden_states_path": None})(), str(data.path)
        )
        dataset = ArrowDataset(max_len=64, datapath=str(data.path), transfer=transfer, on_missing="raise")
        loaded[dtype] = dataset[0]["hidden_states"].float()
    assert loaded["fp8"].shape == loaded["bfloat16"].shape == (loaded["fp8"].shape[0], 3 * HIDDEN)
    error = (loaded["fp8"] - loaded["bfloat16"]).norm() / loaded["bfloat16"].norm()
    assert 0 < error < 0.05  # e4m3 (3 mantissa bits, per-token scale) on random normal states
    assert torch.isfinite(loaded["fp8"]).all()

    manifest = current_folder(tmp_path / "fp8" / "hidden_states" / "demo") / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "dtype": "bfloat16"}))
    with pytest.raises(TrainingDataError, match=r"holds fp8 hidden states but manifest.json says bfloat16"):
        build_training_data(tmp_path / "fp8", ["demo"], tmp_path / "work-2")
