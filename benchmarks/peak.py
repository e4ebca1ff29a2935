"""The bf16 matmul rate measured in the benchmark's own job: the denominator of every MFU figure."""

from __future__ import annotations

import time


def matmul_peak(device: str = "cuda", dtype=None, n: int = 8192, iters: int = 30) -> float:
    """FLOP/s of one square ``n``-matmul in ``dtype`` (default bf16), after three warm-up products."""
    import torch

    dtype = dtype or torch.bfloat16
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(iters):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * iters / (time.perf_counter() - started)
