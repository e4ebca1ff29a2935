"""A sample's file: valid safetensors whatever path its bytes took, the states starting at an aligned offset and
written with O_DIRECT from aligned memory where the file system allows it."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from benchmarks.extraction_writes import page_aligned
from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import FEATURE_FILE_ALIGN
from eagle_assets.hidden_states.safetensors_file import write_safetensors


def sample(tokens: int, hidden: int, fp8: bool) -> dict:
    torch.manual_seed(tokens)
    states = torch.randn(tokens, 4, hidden).to(torch.bfloat16)
    tensors = {"hidden_states": states, "token_ids": torch.arange(tokens, dtype=torch.int64)}
    if fp8:
        tensors.update(hidden_states=states.to(torch.float8_e4m3fn), hidden_states_scales=torch.rand(tokens, 1, 1))
    return tensors


def direct_writes_here(folder) -> bool:
    probe = folder / "probe"
    probe.touch()
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize(("tokens", "hidden"), [(1031, 256), (3, 24)])
def test_the_file_loads_back_with_the_states_aligned_whichever_way_it_was_written(tmp_path, fp8, tokens, hidden):
    tensors = sample(tokens, hidden, fp8)
    aligned = {**tensors, "hidden_states": page_aligned(tensors["hidden_states"])}
    files = {}
    for name, given, direct in (("unaligned", tensors, True), ("buffered", aligned, False), ("direct", aligned, True)):
        path = files[name] = tmp_path / f"{name}.safetensors"
        direct_bytes, sha = write_safetensors(path, given, direct)
        states_bytes = tensors["hidden_states"].nbytes
        expected = (
            states_bytes - states_bytes % FEATURE_FILE_ALIGN if name == "direct" and direct_writes_here(tmp_path) else 0
        )
        assert direct_bytes == expected, name
        loaded = load_file(str(path))
        assert set(loaded) == set(tensors)
        for key, value in tensors.items():
            assert loaded[key].dtype == value.dtype and torch.equal(
                loaded[key].view(torch.uint8), value.view(torch.uint8)
            )
        with safe_open(str(path), "pt") as fh:
            assert sorted(fh.keys()) == sorted(tensors)
        with open(path, "rb") as fh:
            assert (8 + int.from_bytes(fh.read(8), "little")) % FEATURE_FILE_ALIGN == 0  # the states start aligned
        assert sha == file_sha256(path)
    assert len({file_sha256(path) for path in files.values()}) == 1  # the same bytes, whichever path they took


def test_the_large_aligned_states_go_with_o_direct_where_the_file_system_takes_it(tmp_path):
    if not direct_writes_here(tmp_path):
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT (tmpfs before Linux 6.6): every byte is buffered")
    states = page_aligned(torch.randn(2048, 4, 512).to(torch.bfloat16))
    written = write_safetensors(tmp_path / "x.safetensors", {"hidden_states": states, "token_ids": torch.arange(2048)})
    assert written.direct_bytes == states.nbytes  # 2048 tokens x 4 KiB: all of it


def test_every_tensor_starts_aligned_to_its_element_size_even_when_the_states_size_is_odd(tmp_path):
    import json

    tensors = {"hidden_states": torch.randn(3, 1, 3).to(torch.bfloat16), "token_ids": torch.arange(3)}  # 18 bytes
    write_safetensors(tmp_path / "odd.safetensors", tensors)
    with open(tmp_path / "odd.safetensors", "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    assert header["token_ids"]["data_offsets"][0] % 8 == 0
    loaded = load_file(str(tmp_path / "odd.safetensors"))
    assert torch.equal(loaded["hidden_states"], tensors["hidden_states"])
