"""The feature files: quantized on the device or by the sink alike, and no file for a broken sample."""

from __future__ import annotations

import pytest
import torch

from eagle_assets.backends import ExtractionRequest, SampleTensors
from eagle_assets.hidden_states.files import SampleWriter


def test_on_device_quantization_writes_the_files_the_sink_would(quick_tiny_verifier, tmp_path):
    """The transformers backend quantizes fp8 batches itself (less to copy off a GPU); its files are
    byte-identical to bf16 samples quantized by the sink with the same hs-connectors function."""
    from eagle_assets.plugin_manager import verifier_backend

    backend = verifier_backend("transformers")
    seqs = [((i, f"s{i}"), list(range(3 + i, 40 + 7 * i))) for i in range(4)]
    digests = []
    for name, on_device in (("device", "fp8"), ("sink", "bfloat16")):
        writer = SampleWriter(tmp_path / name, 4, backend.hidden_size(quick_tiny_verifier), "fp8")
        backend.extract(
            quick_tiny_verifier,
            ExtractionRequest(seqs, [1, 2, 3, 4], device="cpu", batch_tokens=128, feature_dtype=on_device),
            writer,
        )
        digests.append({key: w.sha256 for key, w in writer.written.items()})
    assert len(digests[0]) == 4 and digests[0] == digests[1]


def test_nan_states_are_refused_with_the_row_named(tmp_path):
    writer = SampleWriter(tmp_path, num_layers=2, hidden_size=3)
    states = torch.zeros(4, 2, 3, dtype=torch.bfloat16)
    states[2, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"row 7: .*NaN/Inf \(first at token 2\)"):
        writer(SampleTensors((7, "abc"), states, torch.arange(4)))
    with pytest.raises(ValueError, match=r"row 7: hidden_states shape"):
        writer(SampleTensors((7, "abc"), torch.zeros(4, 3, 3, dtype=torch.bfloat16), torch.arange(4)))
    fp8 = SampleWriter(tmp_path, num_layers=2, hidden_size=3, feature_dtype="fp8")
    with pytest.raises(ValueError, match=r"row 7: .*NaN/Inf \(first at token 2\)"):
        fp8(SampleTensors((7, "abc"), states, torch.arange(4)))  # checked before quantizing
    from hs_connectors.fp8_utils import quantize_tensor_to_fp8

    quantized, scales = quantize_tensor_to_fp8(states)  # a NaN poisons its token's scale
    with pytest.raises(ValueError, match=r"row 7: .*NaN/Inf \(first at token 2\)"):
        fp8(SampleTensors((7, "abc"), quantized, torch.arange(4), scales))
    with pytest.raises(ValueError, match=r"delivered fp8 states but the storage dtype is 'bfloat16'"):
        writer(SampleTensors((7, "abc"), quantized, torch.arange(4), scales))
    # A NaN in the e4m3 values themselves (either sign), every scale finite: found by the values' own test.
    clean, clean_scales = quantize_tensor_to_fp8(torch.ones(4, 2, 3, dtype=torch.bfloat16))
    for pattern in (0x7F, 0xFF):
        bad = clean.clone()
        bad.view(torch.uint8)[1, 0, 2] = pattern
        with pytest.raises(ValueError, match=r"row 7: .*NaN/Inf \(first at token 1\)"):
            fp8(SampleTensors((7, "abc"), bad, torch.arange(4), clean_scales))
    fp8(SampleTensors((7, "abc"), clean, torch.arange(4), clean_scales))  # the same sample, clean, is written
    assert [p.name for p in tmp_path.rglob("*.safetensors")] == ["abc.safetensors"]


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
@pytest.mark.parametrize("tokens", [37, 1])
def test_a_files_recorded_sha256_is_the_files_own(tmp_path, dtype, tokens):
    """The sink hashes the tensors from memory while they are written: the same digest as the file's, and only
    while the file on disk is what was hashed."""
    from eagle_assets.core.files import file_sha256
    from eagle_assets.hidden_states.files import encode_sample, write_sample
    from eagle_assets.hidden_states.safetensors_file import layout, on_disk_as_hashed

    torch.manual_seed(0)
    states = torch.randn(tokens, 4, 24, dtype=torch.bfloat16)
    tensors = encode_sample(states, torch.arange(tokens), 4, 24, "row 0", dtype)
    rel, sha, size = write_sample(tmp_path, "abc", tensors)
    path = tmp_path / rel
    assert sha == file_sha256(path) and size == path.stat().st_size
    prefix, _ = layout(tensors)
    assert on_disk_as_hashed(path, prefix, size)
    with open(path, "ab") as fh:  # a file that is not the tensors' bytes back to back: no digest from memory
        fh.write(b"\0")
    assert not on_disk_as_hashed(path, prefix, size)
    assert on_disk_as_hashed(path, prefix, size + 1)  # the check is the header's bytes and the size given
    assert not on_disk_as_hashed(path, prefix.replace(b'"', b"'", 1), size + 1)  # another header, the file's size
