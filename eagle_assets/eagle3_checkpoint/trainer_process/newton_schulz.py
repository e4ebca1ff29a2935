"""Muon's Newton-Schulz iteration with its two symmetric products computed once per pair of blocks.

``torch.optim.Muon`` (the optimizer speculators builds for the draft's 2-D weights) orthogonalizes each
update with five iterations of ``A = X X^T; B = b A + c A A; X = a X + B X``. ``A`` and ``A A`` are
symmetric, yet each is a full matrix product; at the drafts' shapes these iterations are a quarter of an
8B-shaped training step and over a third of a Kimi-K2.5-shaped one. :func:`newton_schulz` computes the
same iteration with both symmetric products built strip by strip on and above the diagonal (row blocks
of ``BLOCK_ROWS``) and mirrored below: for ``k`` strips, ``(k + 1) / 2k`` of their multiply-adds.
Every entry is the same dot product in the same precision (bf16 operands, ``b A + c A A`` in one
``addmm`` as torch has it); only the matrix-multiply kernels that compute them differ.
:func:`install` makes ``torch.optim.Muon`` use it in the training process.
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor
from torch.optim import _muon

# A strip this tall is still a full-size matrix product for a GPU, and at the drafts' widths (4096 to
# 7168 rows) it gives 4 to 7 strips.
BLOCK_ROWS = 1024
# torch.optim._muon's function and its parameters, which install() replaces and newton_schulz() keeps.
_TORCH_FUNCTION = "_zeropower_via_newtonschulz"
_PARAMETERS = ["grad", "ns_coefficients", "ns_steps", "eps"]
# torch's own, kept for sharded (DTensor) updates: their row slices would gather across ranks.
_TORCH_ITERATION = getattr(_muon, _TORCH_FUNCTION, None)


def symmetric_product(x: Tensor, *, scale: tuple[float, float] | None = None, block_rows: int = BLOCK_ROWS) -> Tensor:
    """``x @ x.T``, or with ``scale = (beta, alpha)`` (``x`` then square and symmetric) ``beta * x + alpha * x @ x.T``
    in one ``addmm`` per strip: each strip of rows from its diagonal block rightwards, the rest mirrored from above."""
    rows = x.size(0)
    out = torch.empty(rows, rows, dtype=x.dtype, device=x.device)
    for start in range(0, rows, block_rows):
        stop = min(start + block_rows, rows)
        strip = out[start:stop, start:]  # a view with the matrix's row stride: the product is written in place
        if scale is None:
            torch.mm(x[start:stop], x[start:].T, out=strip)
        else:
            beta, alpha = scale
            torch.addmm(x[start:stop, start:], x[start:stop], x[start:].T, beta=beta, alpha=alpha, out=strip)
        out[stop:, start:stop] = out[start:stop, stop:].T
    return out


def newton_schulz(
    grad: Tensor,
    ns_coefficients: tuple[float, float, float],
    ns_steps: int,
    eps: float,
    *,
    block_rows: int = BLOCK_ROWS,
) -> Tensor:
    """``torch.optim._muon._zeropower_via_newtonschulz`` with its symmetric products by strips (module docstring)."""
    if type(grad) is not torch.Tensor and _TORCH_ITERATION is not None:
        return _TORCH_ITERATION(grad, ns_coefficients, ns_steps, eps)
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if grad.dim() != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    x = grad.bfloat16()
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(ns_steps):
        gram = symmetric_product(x, block_rows=block_rows)
        update = symmetric_product(gram, scale=(b, c), block_rows=block_rows)  # b A + c A A
        x = torch.addmm(x, update, x, beta=a)
    return x.T if tall else x


def install() -> bool:
    """Have ``torch.optim.Muon`` orthogonalize with :func:`newton_schulz`; False (nothing changed) where this
    torch's Muon has no such function with those parameters."""
    current = getattr(_muon, _TORCH_FUNCTION, None)
    if current is newton_schulz:
        return True
    if current is None or list(inspect.signature(current).parameters) != _PARAMETERS:
        return False
    setattr(_muon, _TORCH_FUNCTION, newton_schulz)
    return True
