"""No host-device synchronisation in speculators' training step outside its logging steps.

speculators 0.9.0's ``Trainer.train_epoch`` adds two scalars to every step's metrics with
``torch.tensor(python_number, device=loss.device)``. A tensor built from Python data on a GPU is
copied from pageable host memory and PyTorch waits for that copy (``cudaStreamSynchronize``): each
step the host stops until the GPU has run the step's forward and backward, then launches the
optimizer step, the next batch's copy and forward while the GPU idles. :func:`install` gives the
trainer module a ``torch`` whose ``tensor`` builds such scalars with ``torch.full`` on the device (a
fill kernel, queued like any other); everything else is torch itself. Metric values are unchanged;
they are still read back (and the GPU waited for) on logging steps only (``--log-freq``).
"""

from __future__ import annotations

import types

import torch


def _device_type(device) -> str | None:
    if device is None:
        return None
    if isinstance(device, int):
        return "cuda"
    return torch.device(device).type


class _QueuedScalarTorch(types.ModuleType):
    """``torch``, except that ``tensor(number, device=<accelerator>)`` does not wait for the device."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(data, *args, dtype=None, device=None, **kwargs):
        if (
            not args
            and not kwargs
            and isinstance(data, (int, float, bool))
            and _device_type(device) not in (None, "cpu")
        ):
            return torch.full((), data, dtype=dtype, device=device)  # dtype inferred as torch.tensor would
        return torch.tensor(data, *args, dtype=dtype, device=device, **kwargs)


def install() -> None:
    """Use :class:`_QueuedScalarTorch` as ``torch`` inside ``speculators.train.trainer`` only."""
    from speculators.train import trainer

    if not isinstance(trainer.torch, _QueuedScalarTorch):
        trainer.torch = _QueuedScalarTorch()
