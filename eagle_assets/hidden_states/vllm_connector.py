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
"""

from __future__ import annotations

import fcntl
import os
from functools import partial

import torch
from hs_connectors.fp8_hidden_states_connector import FP8HiddenStatesConnector
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)


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


class CPUSafeHiddenStatesConnector(_CPUCopyMixin, ExampleHiddenStatesConnector):
    """bf16 files: ``hidden_states`` [tokens, layers, H] + ``token_ids`` [tokens]."""


class FP8CPUSafeHiddenStatesConnector(_CPUCopyMixin, FP8HiddenStatesConnector):
    """FP8 files (hs-connectors' format): e4m3 ``hidden_states`` + fp32 ``hidden_states_scales``."""
