"""Hidden-state extraction spread over several devices of one host: one worker process per device.

Each worker loads its own whole copy of the verifier on its device and runs the backend's ordinary
single-device extraction (its length bucketing, copy overlap and writer threads) over its share of
the sequences; the workers share nothing but the output folder. This is data parallelism for a
verifier that fits one device. A verifier too large for one GPU is extracted by vLLM's tensor-parallel
engine instead (the ``vllm`` and ``kimi`` backends), in one process.

- Sharding: sequences are dealt longest first to the worker with the fewest tokens so far (ties by
  content id), so the shards are balanced in forward cost and deterministic for a given to-do list.
  Every content id goes to exactly one worker, so no two workers ever write the same file; resume
  needs nothing extra, because the to-do list is simply what is not on disk yet.
- Workers write with their own :class:`~eagle_assets.hidden_states.files.SampleWriter` (of the
  caller's writer's class; atomic renames) and send progress and their written files (sha256, bytes) to the parent
  over a queue.
  The parent merges them into the caller's writer, so the asset writes ``index.parquet`` and
  ``manifest.json`` once, exactly as after a single-process run.
- Failure: the first worker error (with its traceback), or a worker that dies without one (killed,
  out of memory), stops the other workers and raises :class:`ExtractionWorkerFailed`. Files already
  renamed into place are whole; the next run reuses them and clears the stopped workers' temporaries.
- Workers are started with ``spawn``: CUDA cannot be initialised again in a forked child, and a
  fresh interpreter inherits no threads or locks from the Dagster process.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from eagle_assets.backends import ExtractionRequest, VerifierBackend
from eagle_assets.core.child_process import die_with_parent, exit_when_orphaned
from eagle_assets.hidden_states.files import SampleWriter, WrittenSample

# Workers report progress at most this often (the asset logs every few seconds anyway).
PROGRESS_EVERY_S = 1.0
# How long to wait for the last messages of a worker that has already exited.
DRAIN_S = 5.0
STOP_TIMEOUT_S = 30.0


class ExtractionWorkerFailed(RuntimeError):
    """A worker process failed; the message names its device and holds its traceback."""


def shard_sequences(sequences: Sequence[tuple], workers: int) -> list[list[tuple]]:
    """Split ``(key, ids)`` pairs (key = ``(row, content_id)``) into ``workers`` shards of balanced
    token counts: longest first, each to the lightest shard so far, ties broken by content id."""
    order = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i][1]), sequences[i][0][1]))
    shards: list[list[tuple]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for i in order:
        lightest = min(range(workers), key=lambda w: (loads[w], w))
        shards[lightest].append(sequences[i])
        loads[lightest] += len(sequences[i][1])
    return shards


@dataclass(frozen=True)
class _Job:
    """Everything one worker needs; pickled into the spawned process."""

    rank: int
    device: str
    backend: VerifierBackend
    model_path: str
    request: ExtractionRequest
    writer_class: type  # the caller's SampleWriter (sub)class
    folder: str
    num_layers: int
    hidden_size: int
    cpu_threads: int


def _worker(job: _Job, messages) -> None:
    """Worker process body: extract this shard, report progress and the written files."""
    die_with_parent()  # a killed Dagster step must not leave workers holding GPUs
    parent = multiprocessing.parent_process().pid
    if os.getppid() != parent:  # it died before the line above
        raise SystemExit(1)
    exit_when_orphaned(parent)
    try:
        import torch

        # Workers share the host's cores instead of each starting one thread per core.
        torch.set_num_threads(job.cpu_threads)
        if job.device.startswith("cuda"):
            torch.cuda.set_device(job.device)  # pinned buffers and streams on this GPU, not cuda:0
        writer = job.writer_class(Path(job.folder), job.num_layers, job.hidden_size, job.request.feature_dtype)
        last = [0.0]

        def progress(samples: int, tokens: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY_S or samples == len(job.request.sequences):
                last[0] = now
                messages.put(("progress", job.rank, samples, tokens))

        job.backend.extract(job.model_path, job.request, writer, progress)
        written = {key: (w.file, w.sha256, w.bytes) for key, w in writer.written.items()}
        messages.put(("done", job.rank, written))
    except BaseException:
        messages.put(("error", job.rank, traceback.format_exc()))
        raise SystemExit(1) from None


def _stop(processes) -> None:
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(STOP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()


def extract_on_devices(
    backend: VerifierBackend,
    model_path,
    request: ExtractionRequest,
    devices: Sequence[str],
    writer: SampleWriter,
    progress: Callable[[int, int], None] | None = None,
    log=None,
    worker_progress: Callable[[int, int, int], None] | None = None,
) -> None:
    """Extract ``request.sequences`` into ``writer``'s folder on ``devices``: in this process for one
    device, else one spawned worker per device, each writing through a writer of ``writer``'s class.
    Afterwards ``writer.written`` holds every file written, as if ``writer`` had been the sink of a
    single-process extraction. ``progress(samples, tokens)`` gets the totals over all workers,
    ``worker_progress(rank, samples, tokens)`` each worker's own (per-device rates). The request's
    ``feature_dtype`` is the writer's (a backend that quantizes on the device does so for fp8 writers)."""
    request = replace(request, feature_dtype=writer.feature_dtype)
    if len(devices) == 1:

        def both(samples: int, tokens: int) -> None:
            if progress is not None:
                progress(samples, tokens)
            if worker_progress is not None:
                worker_progress(0, samples, tokens)

        return backend.extract(model_path, replace(request, device=devices[0]), writer, both)
    shards = shard_sequences(request.sequences, len(devices))
    threads = max(1, (os.cpu_count() or 1) // len(devices))
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    processes = {}
    for rank, (device, shard) in enumerate(zip(devices, shards)):
        if not shard:
            continue
        job = _Job(
            rank,
            device,
            backend,
            str(model_path),
            replace(request, sequences=shard, device=device),
            type(writer),
            str(writer.folder),
            writer.num_layers,
            writer.hidden_size,
            threads,
        )
        processes[rank] = context.Process(target=_worker, args=(job, messages), name=f"hidden-states-{rank}-{device}")
        if log is not None:
            log.info(
                f"extraction worker {rank} on {device}: {len(shard)} files, {sum(len(ids) for _, ids in shard)} tokens"
            )
    counts = dict.fromkeys(processes, (0, 0))
    finished: set[int] = set()

    def handle(message) -> None:
        kind, rank = message[0], message[1]
        if kind == "error":
            raise ExtractionWorkerFailed(f"extraction worker {rank} on {devices[rank]} failed:\n{message[2]}")
        if kind == "progress":
            counts[rank] = (message[2], message[3])
            if worker_progress is not None:
                worker_progress(rank, message[2], message[3])
        else:  # done: the parent's writer now knows the worker's files (no thread writes to it here)
            writer.written.update({key: WrittenSample(*w) for key, w in message[2].items()})
            finished.add(rank)
        if progress is not None:
            progress(sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values()))

    try:
        for proc in processes.values():
            proc.start()
        while len(finished) < len(processes):
            try:
                handle(messages.get(timeout=1.0))
                continue
            except queue.Empty:
                pass
            dead = [r for r, proc in processes.items() if r not in finished and proc.exitcode is not None]
            if dead:
                try:  # its error or result may still be in the pipe
                    handle(messages.get(timeout=DRAIN_S))
                except queue.Empty:
                    rank, code = dead[0], processes[dead[0]].exitcode
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    raise ExtractionWorkerFailed(
                        f"extraction worker {rank} on {devices[rank]} {how} without reporting an error (out of "
                        "host or GPU memory? lower verifier.batch_tokens); files written so far are kept"
                    ) from None
        for proc in processes.values():
            proc.join()
    finally:
        _stop(processes.values())
