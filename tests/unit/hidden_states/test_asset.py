"""The ``hidden_states`` asset, materialized for real on the tiny verifier (transformers backend)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM

from eagle_assets.core.files import file_sha256
from eagle_assets.hidden_states.files import (
    INDEX_SCHEMA,
    SCALES_KEY,
    content_id,
    dequantized,
    load_sample,
)
from tests.helpers.features import (
    folder,
    index_path,
    manifest,
    materialize_hidden_states,
    metadata,
    verifier_for,
    write_token_sequences,
)


def close_to_forward(stored: dict, expected: torch.Tensor) -> None:
    """bf16 files equal the fp32 forward up to bf16 rounding; fp8 files (dequantized with hs-connectors,
    in bf16) up to e4m3's half ULP (2^-4 relative, 2^-10 x the token's scale for subnormals) plus three
    bf16 roundings (capture, scale, product: 3 x 2^-9)."""
    states = dequantized(stored)["hidden_states"].float()
    if SCALES_KEY not in stored:
        torch.testing.assert_close(states, expected, rtol=1.6e-2, atol=1e-2)
        return
    bound = (2**-4 + 3 * 2**-9) * expected.abs() + stored[SCALES_KEY] * 2**-9 + 1e-6
    assert bool(((states - expected).abs() <= bound).all()), float(((states - expected).abs() / bound).max())


@pytest.mark.parametrize("feature_dtype", ["bfloat16", "fp8"])
def test_states_equal_a_direct_forward_pass_and_load_in_speculators(
    storage_root, quick_tiny_verifier, tmp_path, feature_dtype
):
    sequences = write_token_sequences(storage_root, quick_tiny_verifier, prompts=10, steps=3)
    # batch_tokens small enough that rows of different lengths share padded batches.
    verifier = verifier_for(quick_tiny_verifier, batch_tokens=400, feature_dtype=feature_dtype)
    result = materialize_hidden_states(storage_root, verifier)
    assert result.success
    meta = metadata(result)
    index = pq.read_table(index_path(storage_root))
    assert index.schema == INDEX_SCHEMA and index.num_rows == sequences.num_rows
    stored_manifest = manifest(storage_root)
    layer_ids = stored_manifest["layer_ids"]
    assert layer_ids == [1, 2, 3, 4] and stored_manifest["dtype"] == feature_dtype  # 4-layer defaults, final last
    assert meta["tokens"] == sum(sequences["seq_len"].to_pylist()) == meta["new_tokens"]
    hidden = stored_manifest["hidden_size"]
    # fp8: one byte per value + a 4-byte scale per token: <= 0.51x of bf16 for any H >= 64.
    assert meta["bytes_per_token"] == {"bfloat16": 4 * hidden * 2 + 8, "fp8": 4 * hidden + 4 + 8}[feature_dtype]
    assert meta["feature_dtype"] == feature_dtype

    model = AutoModelForCausalLM.from_pretrained(quick_tiny_verifier, dtype=torch.float32).eval()
    model.config.tie_last_hidden_states = False  # keep hidden_states[-1] pre-norm, as vLLM defines it
    by_id = {r["prompt_id"]: r for r in sequences.to_pylist()}
    for row in index.to_pylist():
        ids = by_id[row["prompt_id"]]["input_ids"]
        path = folder(storage_root) / row["file"]
        assert file_sha256(path) == row["sha256"]
        stored = load_sample(path)
        assert stored["token_ids"].dtype == torch.int64 and stored["token_ids"].tolist() == ids
        assert (SCALES_KEY in stored) == (feature_dtype == "fp8")
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True)
        expected = torch.stack([out.hidden_states[k][0] for k in layer_ids], dim=1)
        close_to_forward(stored, expected)
        # The final entry is the state BEFORE the final norm: normalized, it is the model's output.
        final = dequantized(stored)["hidden_states"][:, -1].float()
        with torch.no_grad():
            post_norm = model.model(torch.tensor([ids])).last_hidden_state[0]
            tol = {"bfloat16": 3e-2, "fp8": 2e-1}[feature_dtype]  # e4m3: 3 mantissa bits, amplified by the norm
            torch.testing.assert_close(model.model.norm(final), post_norm, rtol=tol, atol=tol)
        assert not torch.allclose(final, post_norm, atol=1e-2)

    # speculators reads the files where they are, through the hs-connectors backend its training config
    # names (`file`, or `fp8`, which dequantizes): a symlink named hs_<row> is all a training folder needs.
    from hs_connectors import HiddenStatesBackend
    from speculators.data_generation.offline import check_hidden_states

    from eagle_assets.hidden_states.files import TRAINER_BACKENDS

    links = tmp_path / "train" / "hidden_states"
    links.mkdir(parents=True)
    first = index.to_pylist()[0]
    (links / "hs_0.safetensors").symlink_to(folder(storage_root) / first["file"])
    backend = HiddenStatesBackend.registry[TRAINER_BACKENDS[feature_dtype]]
    loaded = backend.from_train_args(SimpleNamespace(hidden_states_path=str(links)), str(tmp_path)).get_cached(0)
    assert SCALES_KEY not in loaded and loaded["hidden_states"].dtype == torch.bfloat16
    assert torch.equal(loaded["hidden_states"], dequantized(load_sample(links / "hs_0.safetensors"))["hidden_states"])
    check_hidden_states(loaded, by_id[first["prompt_id"]]["input_ids"])
    assert torch.equal(loaded["token_ids"], torch.tensor(by_id[first["prompt_id"]]["input_ids"], dtype=torch.int32))

    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["checked"].value == min(16, index.num_rows)

    again = materialize_hidden_states(storage_root, verifier)
    assert again.success and metadata(again)["files_written"] == 0
    assert metadata(again)["files_reused"] == meta["files"]


def test_bf16_and_fp8_files_are_never_reused_for_each_other(storage_root, quick_tiny_verifier):
    sequences = write_token_sequences(storage_root, quick_tiny_verifier, prompts=4, steps=1)
    ids = sequences["input_ids"].to_pylist()[0]
    assert content_id(ids, "v", [1, 2], "bfloat16") != content_id(ids, "v", [1, 2], "fp8")
    files, indexes = {}, {}
    for dtype in ("bfloat16", "fp8"):
        result = materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier, feature_dtype=dtype))
        assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
        meta = metadata(result)
        assert meta["files_reused"] == 0 and meta["files_written"] == meta["files"]  # nothing of the other dtype
        files[dtype] = set(pq.read_table(index_path(storage_root))["file"].to_pylist())
        assert manifest(storage_root)["dtype"] == dtype
        indexes[dtype] = (index_path(storage_root), index_path(storage_root).read_bytes())
    assert not files["bfloat16"] & files["fp8"]
    assert all(SCALES_KEY in load_sample(folder(storage_root) / f) for f in files["fp8"])
    back = materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier, feature_dtype="bfloat16"))
    assert metadata(back)["files_written"] == 0  # its own bf16 files again, untouched by the fp8 run
    assert set(pq.read_table(index_path(storage_root))["file"].to_pylist()) == files["bfloat16"]
    # Each materialization's index is its own version, never rewritten: the bf16 one is current again.
    assert index_path(storage_root) == indexes["bfloat16"][0] != indexes["fp8"][0]
    assert all(path.read_bytes() == stored for path, stored in indexes.values())


def test_files_match_rows_check_catches_a_changed_file(storage_root, quick_tiny_verifier):
    write_token_sequences(storage_root, quick_tiny_verifier, prompts=3, steps=1)
    assert materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier)).success
    entry = pq.read_table(index_path(storage_root)).to_pylist()[0]
    path = folder(storage_root) / entry["file"]
    stored = load_sample(path)
    stored["hidden_states"][0, 0, 0] += 1  # a silent edit after indexing
    from safetensors.torch import save_file

    save_file(stored, str(path))
    # The re-run reuses the file (same content id) and the check re-hashes it against the index.
    result = materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier))
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.metadata["problems"].value == 1
    assert "changed since it was indexed" in check.metadata["examples"].value
    assert check.description.startswith("1 of 3 sampled files") and "delete the files" in check.description


def test_disk_budget_fails_fast_with_the_numbers(storage_root, quick_tiny_verifier):
    write_token_sequences(storage_root, quick_tiny_verifier, prompts=4, steps=1)
    result = materialize_hidden_states(storage_root, verifier_for(quick_tiny_verifier), {"disk_headroom_gb": 1e9})
    assert not result.success
    [event] = result.get_step_failure_events()
    text = event.step_failure_data.user_failure_data.description
    assert "GB needed" in text and "GB free" in text and "bytes/token" in text
    assert not (folder(storage_root) / "tensors").exists()  # failed before the model was even loaded
