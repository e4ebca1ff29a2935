"""`lineage verify` throughput vs `find | xargs -P N sha256sum` over the same files, and the quick tier's time.

Builds a synthetic storage root: hidden-state-shaped files (``--min-mb`` to ``--max-mb``, log-uniform, up to
``--total-gb`` in all) under ``hidden_states/bench/tensors/``, each recorded with the sha256 computed while
it was written (as the hidden_states writer records them) through :func:`eagle_assets.lineage.record.file_entry`,
and a kept checkpoint (config, ``--weights-mb`` of weights, training.json) written by
:func:`eagle_assets.eagle3_checkpoint.saved.keep_checkpoint` with :func:`~eagle_assets.lineage.record.write_lineage`,
so the record is the project's own. Then, alternating, ``--repeats`` times after one warm-up of each:

- ``verify``: :func:`eagle_assets.lineage.verify.verify_lineage` in this process (the full tier: every
  sha256; ``--workers`` threads; no Dagster instance, no key; the command's start-up excluded);
- ``sha256sum``: ``find ROOT -type f -print0 | xargs -0 -P N -n B sha256sum > /dev/null`` (N = the same
  worker count, B files per process so that each worker gets about four batches);
- ``quick``: the quick tier (every size, ``--sample`` files' sha256, a new seed each run).

The page cache is not dropped (that needs root): the warm-ups read every file by both sides first, and
the resident share of the tree is measured with ``fincore`` before the timed runs and printed, so the
figures are those of a cached tree when it fits in memory. Throughput = bytes hashed / wall time; last
line ``verify_vs_sha256sum_ratio=<median verify MB/s / median sha256sum MB/s>`` (target >= 0.9).

    python benchmarks/lineage_verify.py [--total-gb 10] [--repeats 3] [--workers N] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, HIDDEN_STATES
from eagle_assets.eagle3_checkpoint.saved import keep_checkpoint
from eagle_assets.lineage.record import REQUIRED_KEYS, file_entry, write_lineage
from eagle_assets.lineage.verify import DEFAULT_WORKERS, verify_lineage

PARTITION = "bench"
BLOCK = 64 << 20


def build(root: Path, total_bytes: int, min_mb: float, max_mb: float, weights_mb: int, seed: int) -> Path:
    """The synthetic storage root and its checkpoint; returns the checkpoint folder."""
    rng = random.Random(seed)
    block = rng.randbytes(BLOCK)
    tensors = root / HIDDEN_STATES / PARTITION / "tensors"
    tensors.mkdir(parents=True)
    artifacts, written, i = [], 0, 0
    while written < total_bytes:
        size = min(int(math.exp(rng.uniform(math.log(min_mb), math.log(max_mb))) * 1e6), total_bytes - written)
        path = tensors / f"{hashlib.sha256(str(i).encode()).hexdigest()[:32]}.safetensors"
        digest = hashlib.sha256()
        with open(path, "wb") as fh:
            offset = rng.randrange(BLOCK)
            head = i.to_bytes(8, "little")  # no two files alike
            fh.write(head)
            digest.update(head)
            left = size - len(head)
            while left > 0:
                piece = memoryview(block)[offset : offset + left]
                fh.write(piece)
                digest.update(piece)
                left -= len(piece)
                offset = 0
        artifacts.append(file_entry(root, path, HIDDEN_STATES, PARTITION, digest.hexdigest()))
        written += size
        i += 1
    best = root / "best"
    best.mkdir()
    (best / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3"}))
    with open(best / "model.safetensors", "wb") as fh:
        for _ in range(weights_mb):
            fh.write(rng.randbytes(1 << 20))
    lineage = {name: {} for name in REQUIRED_KEYS} | {
        "storage_root": str(root),
        "artifacts": artifacts,
        "training": {"seed": seed},
    }
    folder, _, _ = keep_checkpoint(
        best,
        root / EAGLE3_CHECKPOINT,
        {"training.json": {"seed": seed}},
        finish=lambda tmp, hashes: write_lineage(tmp, lineage, hashes),
    )
    shutil.rmtree(best)
    return folder


def tree_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def resident_fraction(root: Path) -> float | None:
    """The share of the tree's bytes in the page cache (fincore), None without fincore."""
    if shutil.which("fincore") is None:
        return None
    files = [str(p) for p in root.rglob("*") if p.is_file()]
    resident = total = 0
    for start in range(0, len(files), 200):
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE", *files[start : start + 200]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in out.splitlines():
            res, size = line.split()
            resident, total = resident + int(res), total + int(size)
    return resident / total if total else None


def sha256sum_command(root: Path, workers: int, batch: int) -> str:
    return f"find {root} -type f -print0 | xargs -0 -P {workers} -n {batch} sha256sum > /dev/null"


def single_stream_rates(root: Path) -> tuple[float, float]:
    """MB/s of one sha256sum and one file_sha256 over the largest file (cached): the hash implementations."""
    from eagle_assets.core.files import file_sha256

    largest = max((p for p in root.rglob("*.safetensors")), key=lambda p: p.stat().st_size)
    size = largest.stat().st_size
    started = time.perf_counter()
    subprocess.run(["sha256sum", str(largest)], capture_output=True, check=True)
    coreutils = size / 1e6 / (time.perf_counter() - started)
    started = time.perf_counter()
    file_sha256(largest)
    return coreutils, size / 1e6 / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-gb", type=float, default=10.0, help="Size of the hidden-state files in all.")
    parser.add_argument("--min-mb", type=float, default=2.0)
    parser.add_argument("--max-mb", type=float, default=48.0)
    parser.add_argument("--weights-mb", type=int, default=256, help="The checkpoint's model.safetensors.")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="verify's threads = xargs -P.")
    parser.add_argument("--sample", type=int, default=32, help="The quick tier's sample.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="File sizes and contents.")
    parser.add_argument("--dir", type=Path, default=None, help="Where to build the tree (default: the temp folder).")
    parser.add_argument("--keep", action="store_true", help="Leave the tree in place afterwards.")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="lineage-verify-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        ckpt = build(base, int(args.total_gb * 1e9), args.min_mb, args.max_mb, args.weights_mb, args.seed)
        files, nbytes = tree_bytes(base)
        batch = max(1, math.ceil(files / (4 * args.workers)))
        print(f"built {files} files, {nbytes / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s under {base}")

        def run_verify(quick: bool, seed: int | None = None) -> tuple[float, int]:
            t0 = time.perf_counter()
            result = verify_lineage(ckpt, workers=args.workers, quick=quick, sample=args.sample, seed=seed)
            elapsed = time.perf_counter() - t0
            if result.problems:
                raise SystemExit(f"verify found problems on an intact tree: {result.problems[:3]}")
            return elapsed, result.hashed_bytes

        def run_sha256sum() -> tuple[float, int]:
            t0 = time.perf_counter()
            subprocess.run(sha256sum_command(base, args.workers, batch), shell=True, check=True)
            return time.perf_counter() - t0, nbytes

        run_verify(False)  # warm-ups: every file read once by each side
        run_sha256sum()
        cached = resident_fraction(base)
        coreutils_rate, hashlib_rate = single_stream_rates(base)
        seconds: dict[str, list[float]] = {"verify": [], "sha256sum": [], "quick": []}
        rates: dict[str, list[float]] = {"verify": [], "sha256sum": []}
        for i in range(args.repeats):
            order = [
                ("verify", lambda: run_verify(False)),
                ("sha256sum", run_sha256sum),
                ("quick", lambda i=i: run_verify(True, seed=i)),
            ]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                elapsed, hashed = fn()
                seconds[name].append(elapsed)
                line = f"repeat {i + 1} {name:9s}: {elapsed:7.2f} s"
                if name in rates:
                    rates[name].append(hashed / 1e6 / elapsed)
                    line += f", {hashed / 1e6 / elapsed:7.0f} MB/s"
                print(line, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    cache = "unknown (no fincore)" if cached is None else f"{cached:.0%} resident after the warm-ups"
    print(
        f"files={files} bytes={nbytes / 1e9:.2f}GB sizes={args.min_mb:g}-{args.max_mb:g}MB log-uniform "
        f"weights={args.weights_mb}MB workers={args.workers} xargs_batch={batch} sample={args.sample} "
        f"repeats={args.repeats} order=alternating cores={os.cpu_count()} page_cache={cache} (nothing dropped)"
    )
    print(
        f"one stream on the largest file: sha256sum {coreutils_rate:.0f} MB/s, file_sha256 (hashlib) "
        f"{hashlib_rate:.0f} MB/s"
    )
    for name in ("verify", "sha256sum"):
        values = rates[name]
        median = statistics.median(values)
        print(
            f"{name}: median {median:.0f} MB/s, {statistics.median(seconds[name]):.2f} s "
            f"(runs {' '.join(f'{v:.0f}' for v in values)} MB/s; spread {(max(values) - min(values)) / median:.1%})"
        )
    quick = statistics.median(seconds["quick"])
    print(
        f"quick: median {quick:.2f} s (runs {' '.join(f'{v:.2f}' for v in seconds['quick'])} s), "
        f"{quick / statistics.median(seconds['verify']):.3f}x the full tier's time"
    )
    paired = [v / s for v, s in zip(rates["verify"], rates["sha256sum"])]
    print(f"paired ratios (same repeat) {[round(r, 3) for r in paired]}")
    ratio = statistics.median(rates["verify"]) / statistics.median(rates["sha256sum"])
    print(
        f"verify_vs_sha256sum_ratio={ratio:.3f} quick_s={quick:.2f} full_s={statistics.median(seconds['verify']):.2f}"
    )


if __name__ == "__main__":
    main()
