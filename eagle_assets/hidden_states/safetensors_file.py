"""A sample's safetensors file written with its states going straight from memory to the disk, and its sha256
taken from memory while they go.

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

A sample's latency counts as well as the bytes' rate: an extraction's last batch is written after its last
forward pass, with the GPU idle. So the sha256 is taken from the tensors' memory on a thread of its own while
the bytes go out (a 235 MB sample: ~130 ms of hashing beside ~180 ms of writing on the development machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import NamedTuple

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


class Written(NamedTuple):
    """What :func:`write_safetensors` did: the bytes that went with ``O_DIRECT``, and the file's sha256 (None when
    the file on disk is not the bytes that were hashed: read it back)."""

    direct_bytes: int
    sha256: str | None


def _sha256_of(parts: list) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)  # releases the GIL for buffers over 2 KB
    return digest.hexdigest()


def on_disk_as_hashed(path: Path, prefix: bytes, size: int) -> bool:
    """Whether the file at ``path`` starts with ``prefix`` (its length and header) and holds ``size`` bytes: then its
    data section is the tensors' bytes that were hashed, laid out as the header says."""
    with open(path, "rb") as fh:
        return fh.read(len(prefix)) == prefix and os.fstat(fh.fileno()).st_size == size


def write_safetensors(path: Path, tensors: dict, direct: bool = True) -> Written:
    """``tensors`` (contiguous, on the CPU, little-endian) as a safetensors file at ``path`` (module docstring),
    hashed from memory on a thread of its own while the bytes go to the disk; ``direct=False``: all of it
    buffered."""
    if sys.byteorder != "little":
        raise ValueError("safetensors files are little-endian; this machine is not")
    prefix, order = layout(tensors)
    parts = [_as_bytes(tensors[name]) for name in order]
    hashed: list[str] = []
    hasher = threading.Thread(target=lambda: hashed.append(_sha256_of([prefix, *parts])), name="sample-sha256")
    hasher.start()
    try:
        aligned = _write(path, prefix, parts, direct)
    finally:
        hasher.join()
    size = len(prefix) + sum(part.nbytes for part in parts)
    return Written(aligned, hashed[0] if hashed and on_disk_as_hashed(path, prefix, size) else None)


def _write(path: Path, prefix: bytes, parts: list, direct: bool) -> int:
    """The file's bytes; returns how many went with ``O_DIRECT``: the first part's aligned bulk, where allowed."""
    first = parts[0]
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
        for part in parts[1:]:
            fh.write(part)
    return aligned
