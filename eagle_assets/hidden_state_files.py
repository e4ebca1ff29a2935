"""One hidden-state sample on disk, in speculators' format, named by its content.

A file holds ``hidden_states`` bf16 [seq, n_aux + 1, H] (aux layers in order, the pre-norm final
state last) and ``token_ids`` int64 [seq], exactly what speculators 0.9.0's ``FileTransfer`` loads
from ``hs_<row>.safetensors`` (and what vLLM's ``ExampleHiddenStatesConnector`` writes), so a
training folder can link to these files instead of copying them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eagle_assets.storage import atomic_path, combined_hash

TENSORS_DIR = "tensors"


def content_id(input_ids: Sequence[int], verifier_identity: str, layer_ids: Sequence[int]) -> str:
    """Same tokens, same verifier, same layers => same file; anything else => another file."""
    ids = np.asarray(input_ids, dtype=np.int64).tobytes()
    return combined_hash([ids, verifier_identity, ",".join(map(str, layer_ids))])[:32]


def relative_path(cid: str) -> str:
    return f"{TENSORS_DIR}/{cid}.safetensors"


def check_sample(hidden_states, token_ids, num_layers: int, hidden_size: int, row: str) -> None:
    """Shape, dtype and finiteness, with the row named: a bad sample must never reach the trainer."""
    import torch

    seq = int(token_ids.shape[0])
    expected = (seq, num_layers, hidden_size)
    if tuple(hidden_states.shape) != expected:
        raise ValueError(f"{row}: hidden_states shape {tuple(hidden_states.shape)} != expected {expected} "
                         "(seq_len, captured layers, hidden size); the backend or layer ids are inconsistent")
    if hidden_states.dtype != torch.bfloat16:
        raise ValueError(f"{row}: hidden_states dtype {hidden_states.dtype}, expected torch.bfloat16")
    # aminmax propagates NaN and is ~10x faster than isfinite().all() on CPU (speculators' own check).
    if not bool(torch.isfinite(torch.stack(torch.aminmax(hidden_states))).all()):
        bad = int((~torch.isfinite(hidden_states)).any(dim=(1, 2)).nonzero()[0])
        raise ValueError(f"{row}: hidden_states contain NaN/Inf (first at token {bad}); "
                         "check the verifier weights and dtype (fp16 overflows on some models: use bf16)")


def write_sample(folder: Path, cid: str, hidden_states, token_ids) -> tuple[str, str, int]:
    """Write one sample atomically; returns (path relative to ``folder``, sha256, bytes).

    ``save_file`` writes straight from the tensor memory without the GIL (``save`` would build a
    bytes copy first, ~3x slower); the hash then reads the file back from the page cache.
    """
    from safetensors.torch import save_file

    rel = relative_path(cid)
    with atomic_path(Path(folder) / rel) as tmp:
        save_file({"hidden_states": hidden_states.contiguous(), "token_ids": token_ids.contiguous()}, str(tmp))
        with open(tmp, "rb") as fh:
            sha = hashlib.file_digest(fh, "sha256").hexdigest()
        size = tmp.stat().st_size
    return rel, sha, size


@dataclass
class WrittenSample:
    file: str
    sha256: str
    bytes: int


class SampleWriter:
    """The sink the ``hidden_states`` asset hands to a backend: check, then write, one sample per
    call (called from the backend's writer threads). Keys are ``(row, content_id)``."""

    def __init__(self, folder: Path, num_layers: int, hidden_size: int):
        self.folder, self.num_layers, self.hidden_size = Path(folder), num_layers, hidden_size
        self.written: dict = {}
        self._lock = threading.Lock()

    def __call__(self, sample) -> None:
        row, cid = sample.key
        check_sample(sample.hidden_states, sample.token_ids, self.num_layers, self.hidden_size, f"row {row}")
        result = WrittenSample(*write_sample(self.folder, cid, sample.hidden_states, sample.token_ids))
        with self._lock:
            self.written[sample.key] = result

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(w.bytes for w in self.written.values())


def load_sample(path: Path) -> dict:
    """The tensors of one file (``hidden_states``, ``token_ids``), as speculators reads them."""
    from safetensors.torch import load_file

    return load_file(str(path))
