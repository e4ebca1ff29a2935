"""Muon's Newton-Schulz iterations over a draft's matrices: torch's (what ``speculators train`` runs) vs the
training process's (:mod:`eagle_assets.eagle3_checkpoint.trainer_process.newton_schulz`, symmetric products
by strips).

    python benchmarks/newton_schulz.py --shape llama-3.1-8b          # on a GPU: the draft's own sizes
    python benchmarks/newton_schulz.py --shape kimi-k2.5
    python benchmarks/newton_schulz.py --shape llama-3.1-8b --scale 4 --block-rows 256   # a CPU: sizes / 4

One timed unit is one optimizer step's orthogonalization: every matrix speculators gives Muon
(:func:`benchmarks.draft_shapes.muon_matrices`), one after another as ``torch.optim.Muon`` runs them, from
fp32 momentum-like inputs, ``--ns-steps`` iterations (speculators' default 5). Variants alternate, a warm-up
step each first, ``--repeats`` repeats of ``--steps`` steps. Printed: each variant's median ms per step with
its spread, the TFLOP per step by count (4 m^2 n + 2 m^3 per iteration for an m x n matrix, m <= n: torch's;
strips of ``--block-rows`` compute (k + 1) / 2k of both symmetric products, k strips) and the rate, and
``ns_speedup`` = torch's median / ours; then how far ours lands from torch's per matrix (max |difference|
over max |torch|), and how far each lands from the same iteration in float64.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.draft_shapes import PRESETS, muon_matrices, verifier_config  # noqa: E402
from benchmarks.spread import spread  # noqa: E402


def flops(rows: int, cols: int, steps: int, block_rows: int | None) -> float:
    """Multiply-add FLOPs of ``steps`` iterations; ``block_rows``: the symmetric products by strips."""
    m, n = min(rows, cols), max(rows, cols)
    strips = -(-m // block_rows) if block_rows else 1
    share = (strips + 1) / (2 * strips) if block_rows else 1.0
    return steps * (2 * m * m * n * share + 2 * m**3 * share + 2 * m * m * n)


def exact_iteration(grad, coefficients: tuple[float, float, float], steps: int, eps: float):
    """The same iteration in float64, every product whole: the reference both bf16 iterations round away from."""
    a, b, c = coefficients
    x = grad.double().T if grad.size(0) > grad.size(1) else grad.double()
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if grad.size(0) > grad.size(1) else x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=PRESETS, default="llama-3.1-8b")
    parser.add_argument("--scale", type=int, default=1, help="divide every matrix dimension by this")
    parser.add_argument("--ns-steps", type=int, default=5)
    parser.add_argument("--block-rows", type=int, default=None, help="default: the training process's")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    import torch
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS
    from torch.optim._muon import _zeropower_via_newtonschulz as torch_newton_schulz

    from eagle_assets.eagle3_checkpoint.trainer_process.newton_schulz import BLOCK_ROWS, newton_schulz

    block_rows = args.block_rows or BLOCK_ROWS
    coefficients = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    device = torch.device(args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu")
    shapes = {
        name: (r // args.scale, c // args.scale) for name, (r, c) in muon_matrices(verifier_config(args.shape)).items()
    }
    torch.manual_seed(0)
    inputs = {name: torch.randn(shape, device=device) for name, shape in shapes.items()}
    variants = {
        "torch": lambda g: torch_newton_schulz(g, coefficients, args.ns_steps, EPS),
        "ours": lambda g: newton_schulz(g, coefficients, args.ns_steps, EPS, block_rows=block_rows),
    }

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def optimizer_steps(variant, steps: int) -> float:
        sync()
        started = time.perf_counter()
        for _ in range(steps):
            for grad in inputs.values():
                variant(grad)
        sync()
        return (time.perf_counter() - started) / steps

    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(
        f"shape={args.shape} scale={args.scale} device={device_name} "
        f"ns_steps={args.ns_steps} block_rows={block_rows} matrices="
        + ",".join(f"{name}:{r}x{c}" for name, (r, c) in shapes.items()),
        flush=True,
    )
    for variant in variants.values():
        optimizer_steps(variant, 1)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(optimizer_steps(variants[name], args.steps))
        print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.2f} ms" for n in variants), flush=True)

    for name in variants:
        work = sum(flops(r, c, args.ns_steps, block_rows if name == "ours" else None) for r, c in shapes.values())
        median = statistics.median(times[name])
        print(
            f"{name}: {median * 1e3:.2f} ms per optimizer step (spread {spread(times[name]):.1%}), "
            f"{work / 1e12:.2f} TFLOP by count, {work / median / 1e12:.1f} TFLOP/s"
        )
    for name, grad in inputs.items():
        reference, own = variants["torch"](grad).float(), variants["ours"](grad).float()
        difference = ((own - reference).abs().max() / reference.abs().max()).item()
        exact = exact_iteration(grad, coefficients, args.ns_steps, EPS)
        errors = {
            key: ((value.double() - exact).abs().max() / exact.abs().max()).item()
            for key, value in (("torch", reference), ("ours", own))
        }
        print(
            f"{name}: max |ours - torch| / max |torch| = {difference:.2e}; against float64: "
            f"torch {errors['torch']:.2e}, ours {errors['ours']:.2e}"
        )
    speedup = statistics.median(times["torch"]) / statistics.median(times["ours"])
    print(
        f"result shape={args.shape} scale={args.scale} ns_steps={args.ns_steps} block_rows={block_rows} "
        f"ns_speedup={speedup:.3f} ns_ms_torch={statistics.median(times['torch']) * 1e3:.2f} "
        f"ns_ms_ours={statistics.median(times['ours']) * 1e3:.2f}"
    )


if __name__ == "__main__":
    main()
