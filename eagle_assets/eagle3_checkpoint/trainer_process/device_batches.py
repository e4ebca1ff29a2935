"""Batches reach the GPU ahead of their step, and FP8 features are dequantized there, not in loader workers.

speculators' trainer copies each batch to the GPU at the top of its step (``.to(non_blocking=True)`` on
the compute stream: the copy of an 8K-token, 4-layer, hidden-4096 batch -- 268 MB in bf16 -- runs
before that step's kernels, not beside the previous step's). Its ``fp8`` hidden-states backend
(hs-connectors' ``FP8Transfer``) dequantizes every sample on a loader worker's CPU: measured 178 ms
single-threaded per 1800-token row of an 8B verifier (a bf16 row's copy: 28 ms), so fp8 training ran
at 0.85x of bf16.

:class:`DeviceBatches` wraps a DataLoader: while step *i* computes, batch *i+1* is copied on a side
stream and, when its features are FP8, dequantized there with hs-connectors' own
``dequantize_fp8_tensor`` -- so half the bytes cross PCIe and no CPU does the arithmetic.
:class:`Fp8OnDeviceDataset` is speculators' ``ArrowDataset`` reading the same files through the same
backend, but leaving values in FP8 with their per-token scales beside them, and
:class:`ScalesKeptCollate` is speculators' collate keeping those scales aligned with the features.
Batches, their order and their values are unchanged (the same arithmetic, on another device).

A packed row also ends where its samples end (:class:`RowEndCollate`): speculators pads every row to
``total_seq_len`` positions, and the draft's step costs the padding as much as the tokens (the forward,
the verifier-logit targets, attention). Reasoning rows of 6-8K tokens under a 9,216-token row are one
sample each, so a fifth of each step went to padding. The loss is a masked mean, so the cut changes no
loss, gradient or metric. Row lengths come from a small set (multiples of :data:`ROW_BUCKET`, at most
nine for a 9,216-token row) so that the compiled draft meets few shapes: Dynamo keeps one entry per KV-cache
layout and row length in the frame after speculators' forced graph break, and past its recompile limit it
runs that frame uncompiled (flex attention then materializes every score). :func:`recompiles_for_rows`
is a limit that covers the set.

An epoch's batches come from one loader iterator running across the epochs (:mod:`.chained_epochs`), so the
workers build the next epoch's first batches during this epoch's last steps, its save and its validation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import speculators.train.data as speculators_data
import torch
from hs_connectors.fp8_utils import SCALES_KEY, dequantize_fp8_tensor
from hs_connectors.transfer import FileTransfer, FP8Transfer
from speculators.train.data import ArrowDataset, CollateFn

from eagle_assets.eagle3_checkpoint.trainer_process.chained_epochs import ChainedEpochs, chainable
from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import pinned_ahead

# Each feature's per-token scales travel under their own key: the model's preprocessing shifts the two
# features differently (EAGLE-3 pairs token t's aux states with token t+1's final state). The names lack
# "hidden_states": speculators' collate casts keys holding it to the features' dtype.
SCALES_OF = {"hidden_states": "aux_feature_scales", "verifier_last_hidden_states": "last_feature_scales"}


def check_generated(data: dict, tokens: list[int]) -> None:
    """speculators' check of a row the extraction server made (``features: online``), FP8 rows included:
    torch has no CPU min/max of FP8, so their values are widened to bf16 for the check alone."""
    states = data.get("hidden_states")
    if isinstance(states, torch.Tensor) and states.dtype == torch.float8_e4m3fn:
        data = {**data, "hidden_states": states.to(torch.bfloat16)}
    _speculators_check(data, tokens)


_speculators_check = speculators_data.check_hidden_states
# Installed on import: loader workers started by spawn import this module when they unpickle the dataset.
speculators_data.check_hidden_states = check_generated


class ScalesKeptTransfer(FileTransfer):
    """hs-connectors' file transfer for FP8 files that returns values as stored and keeps each
    sample's scales for :class:`Fp8OnDeviceDataset` to pick up (speculators' dataset passes only the
    hidden states and token ids on)."""

    def __init__(self, hidden_states_path: Path):
        super().__init__(hidden_states_path)
        self.last_scales: torch.Tensor | None = None

    def _keep_scales(self, sample):
        if sample is not None:
            sample = dict(sample)
            self.last_scales = sample.pop(SCALES_KEY)
        return sample

    def get_cached(self, file_idx: int):
        return self._keep_scales(super().get_cached(file_idx))

    def get_generated(self, hs_transfer_params):
        sample = self._keep_scales(super().get_generated(hs_transfer_params))
        if sample is not None and not bool(torch.isfinite(self.last_scales).all()):
            raise ValueError("the generated row's FP8 scales are not all finite")  # speculators retries the row
        return sample


class Fp8OnDeviceDataset(ArrowDataset):
    """speculators' dataset; with the ``fp8`` backend its samples keep FP8 features, each with its
    per-token scales (``[tokens, 1]`` float32, :data:`SCALES_OF`), and collate packs FP8 buffers."""

    def __init__(self, *args, transfer=None, **kwargs):
        self.fp8_on_device = isinstance(transfer, FP8Transfer)
        if self.fp8_on_device:
            transfer = ScalesKeptTransfer(transfer.hidden_states_path)
        super().__init__(*args, transfer=transfer, **kwargs)
        if self.fp8_on_device:
            self.dequantize_dtype = self.hidden_states_dtype
            self.hidden_states_dtype = torch.float8_e4m3fn  # the collate buffers' dtype

    def _get_raw_data(self, index: int):
        data = super()._get_raw_data(index)
        if self.fp8_on_device and isinstance(data, dict):
            # One scale per token over every stored layer: [tokens, layers, 1] -> [tokens, 1].
            scales = self.transfer.last_scales.reshape(-1, 1).float()
            data.update(dict.fromkeys(SCALES_OF.values(), scales))
        return data


class ScalesFollowFeatures:
    """A sample preprocessing step (speculators' ``shift_batch`` for EAGLE-3) that also moves each
    feature's scales the way it moves that feature: the step is applied once more with the scales in the
    features' places. Samples without scales pass through the step alone."""

    def __init__(self, preprocess):
        self.preprocess = preprocess

    def __call__(self, sample: dict) -> dict:
        scales = {key: sample.pop(name) for key, name in SCALES_OF.items() if name in sample}
        if self.preprocess is None:
            return {**sample, **{SCALES_OF[key]: value for key, value in scales.items()}}
        out = self.preprocess(sample)
        if scales:
            moved = self.preprocess({**sample, **scales})
            out.update({SCALES_OF[key]: moved[key] for key in scales})
        return out


class ScalesKeptCollate(CollateFn):
    """speculators' collate, its preprocessing wrapped in :class:`ScalesFollowFeatures`."""

    def __init__(self, *args, preprocess=None, **kwargs):
        super().__init__(*args, preprocess=ScalesFollowFeatures(preprocess), **kwargs)


# Whole blocks of flex attention's 128 positions (speculators' draft-token mask extension assumes them),
# eight at a time: few distinct lengths, and none of one block (Dynamo specializes a size of 1).
ROW_BUCKET = 1024


def trim_padding(batch: dict, max_len: int) -> dict:
    """``batch``, one packed row of ``max_len`` positions, cut after its last sample's position (rounded up
    to :data:`ROW_BUCKET`, at most ``max_len``): every per-position tensor is cut, nothing else changes."""
    used = int((batch["document_ids"] != -1).sum())
    keep = min(max_len, -(-max(used, 1) // ROW_BUCKET) * ROW_BUCKET)
    if keep == max_len:
        return batch
    return {
        key: value[:, :keep]
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == max_len
        else value
        for key, value in batch.items()
    }


def recompiles_for_rows(max_len: int, ttt_steps: int) -> int:
    """A recompile limit that covers every row length :func:`trim_padding` gives (and one spare), once per
    ttt step's KV-cache layout and the empty cache, in training and in validation (no grad: other guards)."""
    return 2 * (-(-max_len // ROW_BUCKET) + 1) * (ttt_steps + 1)


class RowEndCollate(ScalesKeptCollate):
    """:class:`ScalesKeptCollate` whose rows end where their samples end (:func:`trim_padding`)."""

    def __call__(self, batch):
        return trim_padding(super().__call__(batch), self.max_len)


def dequantize_features(batch: dict, dtype: torch.dtype) -> dict:
    """A batch of FP8 features (with their scales) with the features in ``dtype``."""
    for key, name in SCALES_OF.items():
        if key in batch:
            scales = batch.pop(name, None)
            # No scales: a batch of only unavailable samples, all zeros.
            batch[key] = (
                dequantize_fp8_tensor(batch[key], scales, dtype=dtype) if scales is not None else batch[key].to(dtype)
            )
    return batch


@dataclass
class LoaderWait:
    """How long one epoch's iteration waited on the loader for its batches (the training thread's time, which
    costs GPU time only once the steps queued ahead of it have run)."""

    batches: int = 0
    seconds: float = 0.0
    first_batch_s: float = 0.0

    def add(self, seconds: float) -> None:
        if not self.batches:
            self.first_batch_s = seconds
        self.batches += 1
        self.seconds += seconds

    def line(self, epoch) -> str:
        return (
            f"epoch {epoch} loader: {self.batches} batches, {self.seconds:.2f}s waiting for them "
            f"({self.first_batch_s:.2f}s for the first)"
        )


class DeviceBatches:
    """Iterates ``loader``'s batches already on ``device`` (one batch ahead, on a side stream),
    dequantized to ``dequantize_dtype`` when given; epochs up to ``last_epoch`` come from one iterator when
    the loader's sampler takes an epoch; with ``pin``, batches are pinned here (``loader_workers.pinned_ahead``)
    before they are copied. Behaves as the loader for speculators' trainer (``len``, ``batch_sampler``,
    ``dataset``). ``wait`` is the last epoch's :class:`LoaderWait`."""

    def __init__(
        self,
        loader,
        device: torch.device,
        dequantize_dtype: torch.dtype | None = None,
        last_epoch: int | None = None,
        pin: bool = False,
    ):
        self.loader = loader
        self.device = torch.device(device)
        self.dequantize_dtype = dequantize_dtype
        self.pin = pin
        # On CPU (tests, small runs) there is nothing to overlap: batches are only dequantized.
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.epochs = ChainedEpochs(loader, last_epoch) if last_epoch is not None and chainable(loader) else None
        self.wait = LoaderWait()

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)  # batch_sampler, dataset, num_workers ...

    def _to_device(self, batch: dict) -> tuple[dict, torch.cuda.Event | None]:
        if self.stream is None:
            return (dequantize_features(batch, self.dequantize_dtype) if self.dequantize_dtype else batch), None
        with torch.cuda.stream(self.stream):
            moved = {
                k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
            }
            if self.dequantize_dtype is not None:
                moved = dequantize_features(moved, self.dequantize_dtype)
            ready = self.stream.record_event()
        return moved, ready

    def _hand_over(self, batch: dict, ready: torch.cuda.Event | None) -> dict:
        if ready is None:
            return batch
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(ready)
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                # Allocated on the side stream, used on the compute stream: keep the allocator from
                # reusing the memory before the step that reads it has run.
                value.record_stream(consumer)
        return batch

    def _epoch_batches(self) -> Iterator[dict]:
        batches = iter(self.loader) if self.epochs is None else self.epochs.take()
        # Pinning serves only the copy to a GPU.
        return pinned_ahead(batches) if self.pin and self.stream is not None else batches

    def _timed(self, batches: Iterator[dict]) -> Iterator[dict]:
        self.wait = LoaderWait()
        while True:
            asked = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                return
            self.wait.add(time.perf_counter() - asked)
            yield batch

    def __iter__(self) -> Iterator[dict]:
        pending = None
        for batch in self._timed(self._epoch_batches()):
            staged = self._to_device(batch)
            if pending is not None:
                yield self._hand_over(*pending)
            pending = staged
        if pending is not None:
            yield self._hand_over(*pending)
