"""The write side of hidden-state extraction alone: how many tokens per second the ``hidden_states``
asset's sink can put on this host's disk, with no model in the way.

    python benchmarks/extraction_writes.py --lengths 6144 8192 --samples 32 --repeats 3

Samples of random bf16 states [seq, 4, 4096] (the 8B preset's three aux layers + the final one, as
``hidden_states_gpu.py`` captures) are made once in host memory, page aligned as the extractor's pinned host
buffers are; then ``--threads`` threads (the extractor's writer-thread count) hand them to the sink, in
rotating order per repeat:

- ``sink``: the asset's writer (checks, safetensors with the states written ``O_DIRECT``, sha256 of the header
  and the data hashed from memory while they go, fsync, atomic rename), bf16;
- ``sink-buffered``: the same writer with every byte through the page cache;
- ``sink-fp8``: the same writer storing fp8 states quantized before timing (the extractor quantizes on the GPU);
- ``save``: ``safetensors.torch.save_file`` alone (page cache, no hash, no fsync);
- ``save-fsync``: ``save_file`` + fsync: what the disk takes once the data must be on it.

Every file is deleted after it is written (the disk never fills). The rates bound extraction from above:
when ``sink`` is below the forward pass's tok/s on the same rows, extraction is write-bound on this host.
Each variant's process CPU time is printed too (CPU ms per sample): what the writes take from the host
beside the forward pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.checkout import import_project

import_project()

import torch  # noqa: E402

from benchmarks.extraction_paths import DeletingWriter  # noqa: E402
from benchmarks.spread import spread  # noqa: E402
from eagle_assets.core.layout import BF16, FP8  # noqa: E402
from eagle_assets.plugins.transformers_extraction import WRITER_THREADS  # noqa: E402

LAYERS, HIDDEN = 4, 4096


class Sample:
    def __init__(self, key, hidden_states, token_ids, scales=None):
        self.key, self.hidden_states, self.token_ids, self.scales = key, hidden_states, token_ids, scales


def page_aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values in memory that starts at a page, as a pinned host buffer's does."""
    page = os.sysconf("SC_PAGE_SIZE")
    room = torch.empty(tensor.nbytes + page, dtype=torch.uint8)
    start = -room.data_ptr() % page
    out = room[start : start + tensor.nbytes].view(tensor.dtype).view(tensor.shape)
    return out.copy_(tensor)


def make_samples(count: int, low: int, high: int) -> list[Sample]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(low, high + 1, (count,), generator=generator).tolist()
    return [
        Sample(
            (row, f"{row:032x}"),
            page_aligned(torch.randn(n, LAYERS, HIDDEN, generator=generator).to(torch.bfloat16)),
            torch.arange(n, dtype=torch.int64),
        )
        for row, n in enumerate(lengths)
    ]


def quantized(samples: list[Sample]) -> list[Sample]:
    """The same samples in fp8, quantized before timing as the extractor does on the GPU."""
    from hs_connectors.fp8_utils import quantize_tensor_to_fp8

    pairs = [quantize_tensor_to_fp8(s.hidden_states) for s in samples]
    return [
        Sample(s.key, page_aligned(states), s.token_ids, scales)
        for s, (states, scales) in zip(samples, pairs, strict=True)
    ]


def save_writer(folder: Path, fsync: bool):
    from safetensors.torch import save_file

    def write(sample: Sample) -> None:
        path = folder / f"{sample.key[1]}.safetensors"
        save_file({"hidden_states": sample.hidden_states, "token_ids": sample.token_ids}, str(path))
        if fsync:
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        path.unlink()

    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs=2, default=(6144, 8192), metavar=("MIN", "MAX"))
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=WRITER_THREADS)
    parser.add_argument("--folder", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()

    samples = make_samples(args.samples, *args.lengths)
    inputs = {BF16: samples, FP8: quantized(samples)}
    tokens = sum(int(s.token_ids.shape[0]) for s in samples)
    folder = Path(tempfile.mkdtemp(prefix="extraction_writes.", dir=args.folder))
    (folder / "tensors").mkdir()
    paths = {
        "sink": lambda: DeletingWriter(folder, LAYERS, HIDDEN, BF16),
        "sink-buffered": lambda: DeletingWriter(folder, LAYERS, HIDDEN, BF16, direct=False),
        "sink-fp8": lambda: DeletingWriter(folder, LAYERS, HIDDEN, FP8),
        "save": lambda: save_writer(folder / "tensors", fsync=False),
        "save-fsync": lambda: save_writer(folder / "tensors", fsync=True),
    }
    names = list(paths)
    print(
        f"samples={args.samples} rows={args.lengths[0]}-{args.lengths[1]} tokens={tokens} "
        f"bf16_bytes_per_token={LAYERS * HIDDEN * 2} threads={args.threads} repeats={args.repeats} folder={folder}",
        flush=True,
    )
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu_ms: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            write = paths[name]()
            os.sync()
            started, cpu = time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(write, inputs[FP8 if name == "sink-fp8" else BF16]))
            rates[name].append(tokens / (time.perf_counter() - started))
            cpu_ms[name].append((time.process_time() - cpu) * 1000 / len(samples))
            print(
                f"repeat {repeat + 1} {name}: {rates[name][-1]:.0f} tok/s, {cpu_ms[name][-1]:.0f} CPU ms/sample",
                flush=True,
            )
    for name in names:
        rate = median(rates[name])
        gbs = rate * LAYERS * HIDDEN * (1 if name == "sink-fp8" else 2) / 1e9
        print(
            f"{name}: median {rate:.0f} tok/s (~{gbs:.2f} GB/s of states), spread {spread(rates[name]):.1%}; "
            f"CPU {median(cpu_ms[name]):.0f} ms/sample, spread {spread(cpu_ms[name]):.1%}"
        )
    print(
        "result writes " + " ".join(f"{name.replace('-', '_')}_tok_s={median(rates[name]):.0f}" for name in names),
        flush=True,
    )
    os.rmdir(folder / "tensors")
    os.rmdir(folder)


if __name__ == "__main__":
    main()
