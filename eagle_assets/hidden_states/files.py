"""One hidden-state sample on disk, in speculators' format, named by its content.

A file holds ``hidden_states`` bf16 [seq, n_aux + 1, H] (aux layers in order, the pre-norm final
state last) and ``token_ids`` int64 [seq], exactly what speculators 0.9.0's ``FileTransfer`` loads
from ``hs_<row>.safetensors`` (and what vLLM's ``ExampleHiddenStatesConnector`` writes), so a
training folder can link to these files instead of copying them.

With ``feature_dtype="fp8"`` a file is in hs-connectors' FP8 format instead (what its
``FP8HiddenStatesConnector`` writes and its ``FP8Backend`` / ``FP8Transfer`` reads, dequantizing on
load): ``hidden_states`` float8_e4m3fn [seq, n_aux + 1, H], ``hidden_states_scales`` fp32 [seq, 1, 1]
(one scale per token over all its layers) and ``token_ids``. Quantization is hs-connectors' own
``quantize_tensor_to_fp8``; the storage dtype is part of the content id, so a bf16 file never
stands in for an fp8 request or the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from eagle_assets.core.files import atomic_path, combined_hash, file_sha256
from eagle_assets.core.layout import BF16, FEATURE_DTYPES, FP8, TENSORS_DIR
from eagle_assets.hidden_states.safetensors_file import write_safetensors

# speculators' training config ``data.hidden_states_backend`` (hs-connectors' backend registry)
# that reads each storage dtype from the same folder layout; "fp8" dequantizes to bf16 on load.
TRAINER_BACKENDS = {BF16: "file", FP8: "fp8"}
SCALES_KEY = "hidden_states_scales"  # hs_connectors.fp8_utils.SCALES_KEY (imported lazily: torch)
# The hidden_states asset's index: one row per training row, naming the tensor file it reads.
INDEX_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("turn", pa.int32()),  # with prompt_id, names the token_sequences row
        ("content_id", pa.string()),
        ("file", pa.string()),  # relative to the partition folder
        ("seq_len", pa.int32()),
        ("sha256", pa.string()),
    ]
)


def check_feature_dtype(feature_dtype: str, field: str = "feature_dtype") -> str:
    if feature_dtype not in FEATURE_DTYPES:
        raise ValueError(f"{field} {feature_dtype!r} is not a hidden-state storage dtype: use one of {FEATURE_DTYPES}")
    return feature_dtype


def content_id(
    input_ids: Sequence[int], verifier_identity: str, layer_ids: Sequence[int], feature_dtype: str = BF16
) -> str:
    """Same tokens, same verifier, same layers, same storage dtype => same file; anything else =>
    another file."""
    ids = np.asarray(input_ids, dtype=np.int64).tobytes()
    return combined_hash([ids, verifier_identity, ",".join(map(str, layer_ids)), check_feature_dtype(feature_dtype)])[
        :32
    ]


def relative_path(cid: str) -> str:
    return f"{TENSORS_DIR}/{cid}.safetensors"


def check_sample(hidden_states, token_ids, num_layers: int, hidden_size: int, row: str, scales=None) -> None:
    """Shape, dtype and finiteness, with the row named: a bad sample must never reach the trainer.

    ``scales`` given: an fp8 sample (e4m3 states + per-token fp32 scales); else a bf16 one."""
    import torch

    seq = int(token_ids.shape[0])
    expected = (seq, num_layers, hidden_size)
    if tuple(hidden_states.shape) != expected:
        raise ValueError(
            f"{row}: hidden_states shape {tuple(hidden_states.shape)} != expected {expected} "
            "(seq_len, captured layers, hidden size); the backend or layer ids are inconsistent"
        )
    want = torch.bfloat16 if scales is None else torch.float8_e4m3fn
    if hidden_states.dtype != want:
        raise ValueError(f"{row}: hidden_states dtype {hidden_states.dtype}, expected {want}")
    if scales is None:
        # aminmax propagates NaN and is ~10x faster than isfinite().all() on CPU (speculators' own check).
        bad_tokens = (
            None
            if bool(torch.isfinite(torch.stack(torch.aminmax(hidden_states))).all())
            else (~torch.isfinite(hidden_states)).any(dim=(1, 2))
        )
    else:
        if tuple(scales.shape) != (seq, 1, 1) or scales.dtype != torch.float32:
            raise ValueError(
                f"{row}: {SCALES_KEY} {tuple(scales.shape)} {scales.dtype}, expected ({seq}, 1, 1) "
                "torch.float32 (one scale per token, hs-connectors' FP8 format)"
            )
        # A NaN/Inf input makes its token's scale non-finite; e4m3fn has no Inf and NaN is S.1111.111. One
        # reduction looks for a NaN (a quarter of the CPU of a per-token test); the tokens, only if there is one.
        bad_tokens = ~torch.isfinite(scales.view(seq))
        magnitudes = hidden_states.view(torch.uint8) & 0x7F
        if magnitudes.numel() and int(magnitudes.amax()) == 0x7F:
            bad_tokens |= (magnitudes == 0x7F).any(dim=(1, 2))
        bad_tokens = bad_tokens if bool(bad_tokens.any()) else None
    if bad_tokens is not None:
        raise ValueError(
            f"{row}: hidden_states contain NaN/Inf (first at token {int(bad_tokens.nonzero()[0])}); "
            "check the verifier weights and dtype (fp16 overflows on some models: use bf16)"
        )


def encode_sample(
    hidden_states, token_ids, num_layers: int, hidden_size: int, row: str, feature_dtype: str = BF16, scales=None
) -> dict:
    """The checked tensors of one file in ``feature_dtype``. bf16 states are quantized here, with
    hs-connectors' ``quantize_tensor_to_fp8``, when fp8 is wanted; a backend that already quantized
    (on the GPU, with the same function) passes its e4m3 states and ``scales``."""
    if scales is not None and feature_dtype != FP8:
        raise ValueError(f"{row}: the backend delivered fp8 states but the storage dtype is {feature_dtype!r}")
    check_sample(hidden_states, token_ids, num_layers, hidden_size, row, scales)
    tensors = {"hidden_states": hidden_states, "token_ids": token_ids}
    if feature_dtype == FP8:
        if scales is None:
            from hs_connectors.fp8_utils import quantize_tensor_to_fp8

            hidden_states, scales = quantize_tensor_to_fp8(hidden_states)
        tensors.update(hidden_states=hidden_states, **{SCALES_KEY: scales})
    return tensors


def write_sample(folder: Path, cid: str, tensors: dict, direct: bool = True) -> tuple[str, str, int]:
    """Write one sample's tensors atomically; returns (path relative to ``folder``, sha256, bytes).

    The states go from memory to the disk without the page cache where it can (and ``direct``:
    :func:`~eagle_assets.hidden_states.safetensors_file.write_safetensors`), without the GIL, hashed from
    memory meanwhile; the whole file is read back where the file on disk is not what was hashed.
    """
    rel = relative_path(cid)
    tensors = {name: t.contiguous() for name, t in tensors.items()}
    with atomic_path(Path(folder) / rel) as tmp:
        sha = write_safetensors(tmp, tensors, direct).sha256 or file_sha256(tmp)
        size = tmp.stat().st_size
    return rel, sha, size


@dataclass
class WrittenSample:
    file: str
    sha256: str
    bytes: int


class SampleWriter:
    """The sink the ``hidden_states`` asset hands to a backend: check, then write, one sample per
    call (called from the backend's writer threads). Keys are ``(row, content_id)``; ``direct``: see
    :func:`write_sample`."""

    def __init__(self, folder: Path, num_layers: int, hidden_size: int, feature_dtype: str = BF16, direct: bool = True):
        self.folder, self.num_layers, self.hidden_size = Path(folder), num_layers, hidden_size
        self.feature_dtype = check_feature_dtype(feature_dtype)
        self.direct = direct
        self.written: dict = {}
        self._lock = threading.Lock()

    def __call__(self, sample) -> None:
        row, cid = sample.key
        tensors = encode_sample(
            sample.hidden_states,
            sample.token_ids,
            self.num_layers,
            self.hidden_size,
            f"row {row}",
            self.feature_dtype,
            sample.scales,
        )
        result = WrittenSample(*write_sample(self.folder, cid, tensors, self.direct))
        with self._lock:
            self.written[sample.key] = result

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(w.bytes for w in self.written.values())


def load_sample(path: Path) -> dict:
    """The tensors of one file as stored (``hidden_states``, ``token_ids``, and for fp8 files
    ``hidden_states_scales``)."""
    from safetensors.torch import load_file

    return load_file(str(path))


def dequantized(sample: dict, dtype=None) -> dict:
    """A loaded sample with bf16 (or ``dtype``) ``hidden_states`` whatever its storage dtype, through
    hs-connectors' ``dequantize_fp8_tensor``, as its ``FP8Transfer`` hands fp8 files to the trainer."""
    if SCALES_KEY not in sample:
        return sample
    import torch
    from hs_connectors.fp8_utils import dequantize_fp8_tensor

    out = {k: v for k, v in sample.items() if k != SCALES_KEY}
    out["hidden_states"] = dequantize_fp8_tensor(sample["hidden_states"], sample[SCALES_KEY], dtype or torch.bfloat16)
    return out
