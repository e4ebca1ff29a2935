"""Hidden-states KV connectors that also run on CPU, for vLLM's ``extract_hidden_states`` method.

vLLM's ``ExampleHiddenStatesConnector`` (vllm/distributed/kv_transfer/kv_connector/v1/
example_hidden_states_connector.py, ``_submit_async_write``) copies a finished request's states out
of the cache-only layer on a side ``torch.cuda.Stream`` into pinned host memory, records a
``torch.cuda.Event`` and writes the file from a thread pool. None of that exists on a CPU build: the
cache already lives in host memory. The subclasses here change only that method, and only when the
cache is on the CPU: slice the cache synchronously, copy it, and hand the write to the same thread
pool with an event that is already complete. On GPU the upstream code runs unchanged.

``FP8CPUSafeHiddenStatesConnector`` is the same change on hs-connectors' ``FP8HiddenStatesConnector``
(e4m3 ``hidden_states`` + fp32 per-token ``hidden_states_scales``); its own ``_write_tensors`` still
does the quantizing. vLLM loads either through ``kv_connector_module_path`` = this module.

With a scratch cap in the extra config (``vllm_engine.kv_transfer_config``) each file is written only
once the scratch folder has room for it: a reader (speculators' ``FileTransfer``) deletes each file
after loading it, so a trainer that falls behind holds the server back instead of filling the disk.
Writes are serialized for that (the server has one writer then); a write that finds no room within the
wait fails and leaves :data:`~eagle_assets.core.layout.SCRATCH_CAP_ERROR_FILE` saying so, which the
trainer's watcher turns into the run's error.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from functools import partial
from pathlib import Path

import torch
from hs_connectors.fp8_hidden_states_connector import FP8HiddenStatesConnector
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)

from eagle_assets.capacity import feature_bytes
from eagle_assets.core.layout import BF16, FP8, SCRATCH_CAP_ERROR_FILE
from eagle_assets.hidden_states.vllm_engine import SCRATCH_CAP_KEY, SCRATCH_WAIT_KEY


def folder_bytes(folder: str | Path) -> int:
    """Bytes of the files in ``folder`` (a file deleted while counting counts 0)."""
    total = 0
    for entry in os.scandir(folder):
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return total


class ScratchCapError(RuntimeError):
    """A file found no room under the scratch cap in time."""


class _CompletedEvent:
    """Stands in for the ``torch.cuda.Event`` upstream waits on: the CPU copy is already done."""

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _CPUCopyMixin:
    """Overrides ``_submit_async_write`` for a cache in host memory; defers to upstream otherwise."""

    def _submit_async_write(self, pending: PendingSave) -> None:
        if self._kv_cache is None or self._kv_cache.device.type != "cpu":
            return super()._submit_async_write(pending)
        if not self._is_tp_rank_zero:
            return None
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        slots = (blocks.reshape(-1, 1) * self._block_size + torch.arange(self._block_size)).flatten()
        # A copy: the blocks go back to the allocator as soon as get_finished reports this request.
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        tensors = {"hidden_states": states, "token_ids": pending.token_ids.clone()}
        assert pending.req_id not in self._req_futures, "Found another KV transfer request with same req_id!"
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        done = _CompletedEvent()
        future = self._executor.submit(self._write_tensors, tensors, done, pending.filename, lock_fd)
        self._req_copy_events[pending.req_id] = done
        self._req_futures[pending.req_id] = future
        future.add_done_callback(partial(self._on_write_done, pending.req_id))
        return None


class _ScratchCapMixin:
    """Waits, before each write, until the scratch folder holds at most the cap minus this file's bytes."""

    feature_dtype = BF16

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scratch_write_lock = threading.Lock()

    def _write_tensors(self, tensors, event, filename: str, lock_fd: int | None) -> None:
        config = self._kv_transfer_config
        cap = int(config.get_from_extra_config(SCRATCH_CAP_KEY, 0))
        if not cap:
            return super()._write_tensors(tensors, event, filename, lock_fd)
        tokens, layers, hidden = tensors["hidden_states"].shape
        needed = feature_bytes(int(tokens), 1, int(layers), int(hidden), self.feature_dtype)
        scratch = Path(filename).parent
        deadline = time.monotonic() + float(config.get_from_extra_config(SCRATCH_WAIT_KEY, 600))
        with self._scratch_write_lock:
            while (held := folder_bytes(scratch)) + needed > cap:
                if time.monotonic() >= deadline:
                    message = (
                        f"scratch cap {cap} bytes: {Path(filename).name} ({needed} bytes) found no room in "
                        f"{scratch} ({held} bytes held) in time; is the trainer loading and deleting its "
                        "files? Raise scratch_cap_gb, or look for files a dead reader left"
                    )
                    (scratch / SCRATCH_CAP_ERROR_FILE).write_text(message)
                    if lock_fd is not None:
                        os.close(lock_fd)  # the reader fails on a missing file instead of waiting on the lock
                    raise ScratchCapError(message)
                time.sleep(0.05)
            return super()._write_tensors(tensors, event, filename, lock_fd)


class CPUSafeHiddenStatesConnector(_ScratchCapMixin, _CPUCopyMixin, ExampleHiddenStatesConnector):
    """bf16 files: ``hidden_states`` [tokens, layers, H] + ``token_ids`` [tokens]."""


class FP8CPUSafeHiddenStatesConnector(_ScratchCapMixin, _CPUCopyMixin, FP8HiddenStatesConnector):
    """FP8 files (hs-connectors' format): e4m3 ``hidden_states`` + fp32 ``hidden_states_scales``."""

    feature_dtype = FP8
