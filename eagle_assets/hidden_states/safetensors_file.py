"""A sample's safetensors file written with its states going straight from memory to the disk, and its sha256
taken from memory.

At the mission's length an 8B verifier's bf16 sample is ~235 MB, ~1 GB/s at the forward pass's rate. Written
through the page cache (``safetensors.torch.save_file``) each byte is copied into the cache, written back by
the kernel's flusher threads and then flushed by ``fsync``: extraction ran at 0.919 of the forward pass writing
to an H200 host's disk and at 0.957 writing the same files to an H100 host's tmpfs, and the development
machine's disk takes 1.1 GB/s with ``O_DIRECT`` against 0.3 GB/s buffered with ``fsync``.

:func:`write_safetensors` lays the file out so that the states start at a multiple of :data:`FEATURE_FILE_ALIGN`
(the header padded with spaces, which the format allows) and writes their aligned bulk with ``O_DIRECT`` from
the tensor's own memory (pinned host buffers, page aligned); the header, the few small tensors and any unaligned
tail go through the page cache. Where the file system or the memory's alignment refuses ``O_DIRECT`` everything
is written buffered: the file's bytes are the same either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from eagle_assets.core.layout import FEATURE_FILE_ALIGN

_DTYPE_NAMES = {
    "torch.bfloat16": "BF16",
    "torch.float16": "F16",
    "torch.float32": "F32",
    "torch.float8_e4m3fn": "F8_E4M3",
    "torch.int64": "I64",
    "torch.int32": "I32",
    "torch.uint8": "U8",
}


def _as_bytes(tensor):
    import torch

    return tensor.reshape(-1).view(torch.uint8).numpy()


def layout(tensors: dict) -> tuple[bytes, list[str]]:
    """(the file's first bytes -- the header's length and the header, padded with spaces to a multiple of
    :data:`FEATURE_FILE_ALIGN` --, the tensors' names in the order of their bytes): the largest tensor first, so
    that its bytes start aligned; the rest after it, widest element first, so that each starts aligned to its
    element size (as ``save_file`` keeps them; where the largest tensor's size would break that, its order)."""
    widest_first = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    largest = max(widest_first, key=lambda name: tensors[name].nbytes)
    rest = [name for name in widest_first if name != largest]
    keeps_alignment = not rest or tensors[largest].nbytes % tensors[rest[0]].element_size() == 0
    order = [largest, *rest] if keeps_alignment else widest_first
    entries, position = {}, 0
    for name in order:
        tensor = tensors[name]
        entries[name] = {
            "dtype": _DTYPE_NAMES[str(tensor.dtype)],
            "shape": list(tensor.shape),
            "data_offsets": [position, position + tensor.nbytes],
        }
        position += tensor.nbytes
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-(8 + len(header)) % FEATURE_FILE_ALIGN)
    return len(header).to_bytes(8, "little") + header, order


def _write_all(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view.nbytes:
        written = os.pwrite(fd, view, offset)  # releases the GIL
        view, offset = view[written:], offset + written


def _direct_fd(path: Path) -> int | None:
    """``path`` opened for ``O_DIRECT`` writes, or None where the file system refuses it (tmpfs on older kernels)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag)
    except OSError:
        return None


def write_safetensors(path: Path, tensors: dict, direct: bool = True) -> int:
    """``tensors`` (contiguous, on the CPU, little-endian) as a safetensors file at ``path`` (module docstring);
    returns how many bytes went with ``O_DIRECT`` (none without ``direct``)."""
    if sys.byteorder != "little":
        raise ValueError("safetensors files are little-endian; this machine is not")
    prefix, order = layout(tensors)
    first = _as_bytes(tensors[order[0]])
    aligned = (
        first.nbytes - first.nbytes % FEATURE_FILE_ALIGN if direct and not first.ctypes.data % FEATURE_FILE_ALIGN else 0
    )
    with open(path, "wb") as fh:
        fh.write(prefix)
        position = len(prefix)
        fd = _direct_fd(path) if aligned else None
        if fd is not None:
            try:
                _write_all(fd, first[:aligned], position)
            except OSError:  # e.g. a block size above the alignment: the same bytes, buffered
                aligned = 0
            finally:
                os.close(fd)
        else:
            aligned = 0
        fh.seek(position + aligned)
        fh.write(first[aligned:])
        for name in order[1:]:
            fh.write(_as_bytes(tensors[name]))
    return aligned


def written_digest(path: Path, tensors: dict) -> str | None:
    """The sha256 of the safetensors file just written from ``tensors``: its header read back from
    ``path``, the data hashed from the tensors' own memory in the header's order (the file's data
    section is those bytes back to back, little-endian as this machine's memory must be). None when the
    machine is big-endian or the header or the file's size says otherwise."""
    if sys.byteorder != "little":
        return None
    with open(path, "rb") as fh:
        length = fh.read(8)
        header = fh.read(int.from_bytes(length, "little"))
    digest = hashlib.sha256(length)
    digest.update(header)
    spans = sorted(
        (entry["data_offsets"], name) for name, entry in json.loads(header).items() if name != "__metadata__"
    )
    position = 0
    for (begin, end), name in spans:
        data = _as_bytes(tensors[name])
        if begin != position or end - begin != data.nbytes:
            return None
        digest.update(data)
        position = end
    if path.stat().st_size != 8 + len(header) + position:
        return None
    return digest.hexdigest()
