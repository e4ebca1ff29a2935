"""Hidden-state extraction with transformers: forward hooks on the captured layers, length-bucketed
batches, device-to-host copies overlapped with the next batch (see the backend module for why)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle_assets.backends import SampleTensors, Sink

# Host buffers in flight: one being filled by the copy stream, the rest being written out.
HOST_BUFFERS = 4
WRITER_THREADS = 8


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str):
    """``auto``: bf16 on an accelerator (the production numerics), fp32 on CPU (bf16 matmuls are
    slow there and fp32 states rounded to bf16 on write are closer to what a GPU computes)."""
    import torch

    if dtype == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return {
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "float32": torch.float32,
        "fp32": torch.float32,
    }[dtype]


def bucket_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped longest first so that rows x longest length <= batch_tokens (one row at least)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def decoder_layers(model, num_layers: int):
    """The decoder's layer list, wherever the architecture nests it (``model.layers``,
    ``language_model.model.layers``, ...): the ModuleList named ``layers`` of the right length."""
    import torch

    for name, module in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(module, torch.nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(f"no decoder layer list of length {num_layers} found in {type(model).__name__}")


@dataclass
class _Buffers:
    """Pooled capture (device) and host buffers, each sized for ``capacity`` tokens. With fp8 storage
    ``quantized`` holds each capture slot's (e4m3 states, fp32 scales) on the device, and a host
    buffer is such a pair too; with bf16 a host buffer is (states, None)."""

    capture: list
    host: queue.Queue
    quantized: list | None = None


class HiddenStateExtractor:
    """Captures ``layer_ids`` from a loaded decoder model and streams per-sample states to a sink."""

    def __init__(
        self,
        model,
        num_layers: int,
        hidden_size: int,
        layer_ids: Sequence[int],
        batch_tokens: int = 16384,
        writer_threads: int = WRITER_THREADS,
        feature_dtype: str = "bfloat16",
        host_buffers: int = HOST_BUFFERS,
    ):
        import torch

        self.model = model
        self.fp8 = feature_dtype == "fp8"
        self.layer_ids = list(layer_ids)
        self.hidden_size = hidden_size
        self.batch_tokens = batch_tokens
        self.writer_threads = writer_threads
        self.host_buffers = host_buffers
        # Seconds the last run's forward loop waited for a host buffer: the writes holding the GPU back.
        self.host_wait_s = 0.0
        # Seconds from the last run's last forward until its writes settled: what the writes add to a run's end.
        self.drain_s = 0.0
        self.device = next(model.parameters()).device
        self.cuda = self.device.type == "cuda"
        layers = decoder_layers(model, num_layers)
        # Module whose output is layer id k: the embeddings for 0, decoder layer k-1 otherwise.
        self._sources = [model.get_input_embeddings() if k == 0 else layers[k - 1] for k in self.layer_ids]
        self._target = None  # the capture view the hooks write into, set per batch
        self._torch = torch

    def _hook(self, slot: int):
        def hook(_module, _inputs, output):
            state = output[0] if isinstance(output, tuple) else output
            self._target[:, : state.shape[1], slot].copy_(state)

        return hook

    def _alloc(self, capacity: int) -> _Buffers:
        torch = self._torch
        shape = (capacity, len(self.layer_ids), self.hidden_size)
        capture = [torch.empty(shape, dtype=torch.bfloat16, device=self.device) for _ in range(2 if self.cuda else 1)]

        def pair(device, pin):
            if not self.fp8:
                return torch.empty(shape, dtype=torch.bfloat16, device=device, pin_memory=pin), None
            return (
                torch.empty(shape, dtype=torch.float8_e4m3fn, device=device, pin_memory=pin),
                torch.empty((capacity, 1, 1), dtype=torch.float32, device=device, pin_memory=pin),
            )

        host: queue.Queue = queue.Queue()
        for _ in range(self.host_buffers):
            host.put(pair("cpu", self.cuda))
        quantized = [pair(self.device, False) for _ in capture] if self.fp8 else None
        return _Buffers(capture, host, quantized)

    def _quantize(self, capture, device_pair, tokens: int):
        """The batch's (e4m3 states, scales) in the slot's device buffers: hs-connectors' per-token
        quantization over all captured layers of a token (padding tokens are quantized and dropped)."""
        from hs_connectors.fp8_utils import quantize_tensor_to_fp8

        states, scales = device_pair
        flat = capture.reshape(tokens, len(self.layer_ids), self.hidden_size)
        q, s = quantize_tensor_to_fp8(flat)
        states[:tokens].copy_(q)
        scales[:tokens].copy_(s)
        return states[:tokens].view(capture.shape), scales[:tokens].view(*capture.shape[:2], 1, 1)

    def run(
        self,
        sequences: Sequence[tuple[Any, Sequence[int]]],
        sink: Sink,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Extract every sequence; returns once the sink has seen all of them (or raises the first
        sink/forward error after the in-flight writes settle)."""
        torch = self._torch
        if not sequences:
            return
        lengths = [len(ids) for _, ids in sequences]
        batches = bucket_batches(lengths, self.batch_tokens)
        capacity = max(self.batch_tokens, max(lengths))
        buffers = self._alloc(capacity)
        handles = [src.register_forward_hook(self._hook(slot)) for slot, src in enumerate(self._sources)]
        copy_stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        copy_done = [None] * len(buffers.capture)
        errors: list[BaseException] = []
        counts = {"samples": 0, "tokens": 0}
        lock = threading.Lock()
        self.host_wait_s = self.drain_s = 0.0
        forwarded = None
        pool = ThreadPoolExecutor(self.writer_threads, thread_name_prefix="hidden-states-writer")

        def write(host, ready, sample_view, scales_view, i, remaining):
            """One sample to the sink; the batch's last sample returns ``host`` to the pool."""
            try:
                if ready is not None:
                    ready.synchronize()
                key, ids = sequences[i]
                scales = None if scales_view is None else scales_view[: lengths[i]]
                sink(
                    SampleTensors(
                        key, sample_view[: lengths[i]], torch.from_numpy(np.array(ids, dtype=np.int64)), scales
                    )
                )
                with lock:
                    counts["samples"] += 1
                    counts["tokens"] += lengths[i]
                    if progress is not None:
                        progress(counts["samples"], counts["tokens"])
            except BaseException as exc:  # surfaced on the main thread after the pool drains
                errors.append(exc)
            finally:
                with lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        buffers.host.put(host)

        try:
            with torch.inference_mode():
                for n, batch in enumerate(batches):
                    if errors:
                        break
                    width = lengths[batch[0]]
                    slot = n % len(buffers.capture)
                    capture = buffers.capture[slot][: len(batch) * width].view(
                        len(batch), width, len(self.layer_ids), -1
                    )
                    if copy_done[slot] is not None:  # the side stream must finish reading it first
                        torch.cuda.current_stream(self.device).wait_event(copy_done[slot])
                    ids = torch.zeros((len(batch), width), dtype=torch.long)
                    for b, i in enumerate(batch):
                        ids[b, : lengths[i]] = torch.from_numpy(np.array(sequences[i][1], dtype=np.int64))
                    ids = ids.pin_memory().to(self.device, non_blocking=True) if self.cuda else ids
                    self._target = capture
                    self.model(input_ids=ids, use_cache=False)
                    source = (
                        self._quantize(capture, buffers.quantized[slot], len(batch) * width)
                        if self.fp8
                        else (capture, None)
                    )
                    waiting = time.perf_counter()
                    host = buffers.host.get()  # blocks while every host buffer is being written out
                    self.host_wait_s += time.perf_counter() - waiting
                    views = [
                        None if h is None else h[: len(batch) * width].view_as(src) for h, src in zip(host, source)
                    ]
                    ready = None
                    if self.cuda:
                        computed = torch.cuda.Event()
                        computed.record(torch.cuda.current_stream(self.device))
                        with torch.cuda.stream(copy_stream):
                            copy_stream.wait_event(computed)
                            for view, src in zip(views, source):
                                if view is not None:
                                    view.copy_(src, non_blocking=True)
                            ready = torch.cuda.Event()
                            ready.record(copy_stream)
                        copy_done[slot] = ready
                    else:
                        for view, src in zip(views, source):
                            if view is not None:
                                view.copy_(src)
                    # One task per sample so slow writes run in parallel; the last one frees ``host``.
                    remaining = [len(batch)]
                    for b, i in enumerate(batch):
                        pool.submit(
                            write, host, ready, views[0][b], None if views[1] is None else views[1][b], i, remaining
                        )
            if self.cuda:
                torch.cuda.current_stream(self.device).synchronize()  # the last forward done, not just launched
            forwarded = time.perf_counter()
        finally:
            pool.shutdown(wait=True)
            self.drain_s = time.perf_counter() - forwarded if forwarded is not None else 0.0
            for handle in handles:
                handle.remove()
            self._target = None
        if errors:
            raise errors[0]
