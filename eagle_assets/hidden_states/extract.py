"""The ``hidden_states`` stage without Dagster: which rows to extract (only rows made for this verifier),
whether the disk holds them, the extraction itself, and the ``index.parquet`` + ``manifest.json`` published
after it.

Tensor files are content-addressed (:func:`~eagle_assets.hidden_states.files.content_id`), shared by
every version in the partition's ``tensors/`` and never rewritten, so the to-do list is whatever is not
on disk yet: a killed extraction resumes by skipping what exists. The index and manifest of each
extraction are a version folder of their own (``versions/<data version>/``); the index's ``file``
column is relative to the partition folder.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_assets.backends import ExtractionRequest, VerifierBackend
from eagle_assets.capacity import feature_bytes_per_token
from eagle_assets.capacity.plan import FILE_OVERHEAD_BYTES
from eagle_assets.core.files import file_sha256, remove_stale_temporaries
from eagle_assets.core.layout import BF16, SCRATCH_DIR, TENSORS_DIR, TOKENIZATION_FILE
from eagle_assets.core.tables import list_rows
from eagle_assets.hidden_states.files import SampleWriter, content_id, relative_path
from eagle_assets.hidden_states.index import index_table, indexed_hashes, manifest_of, publish_index
from eagle_assets.hidden_states.parallel import extract_on_devices
from eagle_assets.prompts.splits import read_current_splits
from eagle_assets.reasoning_samples.recipe import tokenizer_hash
from eagle_assets.token_sequences.drift import MAX_PROMPT_MISMATCH_RATE, PROMPT_DRIFT_FIX

GB = 1e9
LOG_EVERY_S = 5.0
SEQUENCE_COLUMNS = ["prompt_id", "turn", "input_ids", "seq_len"]


class HiddenStatesInputError(ValueError):
    """The rows to extract cannot be read; the message names the asset to materialize first."""


class SequencesNotForVerifier(HiddenStatesInputError):
    """The token_sequences version was made for another tokenizer, or its prompts drifted beyond the
    template_drift limit; the message names the numbers and the fix."""


class NotEnoughDisk(RuntimeError):
    """The estimated write does not fit the disk with the headroom left; ``metadata`` holds the numbers."""

    def __init__(self, message: str, metadata: dict):
        super().__init__(message)
        self.metadata = metadata


def check_made_for_verifier(sequences_file: Path, model_path: Path, partition: str) -> None:
    """:class:`SequencesNotForVerifier` unless the ``tokenization.json`` beside ``sequences_file`` records the
    tokenizer of the verifier folder ``model_path`` and a prompt drift within the template_drift limit.

    The record, not the rows, is read: that costs nothing at any size. The blocking template_drift check
    stops hidden_states only in the run that made the rows; a later run is stopped here."""
    record_path = sequences_file.with_name(TOKENIZATION_FILE)
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    made_for, drift = record.get("tokenizer_hash"), record.get("drift") or {}
    rate = drift.get("drift_prompt_mismatch_rate")
    if made_for is None or rate is None:
        raise SequencesNotForVerifier(
            f"{record_path} is missing or records no tokenizer_hash or drift, so nothing shows which verifier the "
            f"rows of token_sequences[{partition}] were made for: re-materialize token_sequences[{partition}]"
        )
    loaded = tokenizer_hash(model_path)
    if made_for != loaded:
        raise SequencesNotForVerifier(
            f"token_sequences[{partition}] ({sequences_file.parent}) was tokenized for {record.get('verifier')} "
            f"with tokenizer {made_for}, but the verifier resource loads {model_path} with tokenizer {loaded}: "
            "the rows' token ids are another vocabulary's, so nothing is extracted. Re-materialize "
            f"token_sequences[{partition}] with this verifier, or point verifier.model_path at "
            f"{record.get('verifier')}."
        )
    if rate > MAX_PROMPT_MISMATCH_RATE:
        raise SequencesNotForVerifier(
            f"token_sequences[{partition}] ({sequences_file.parent}) failed its template drift check: the prompts "
            f"of {rate:.1%} of {drift.get('drift_checked')} re-rendered samples differ from the server's tokens "
            f"(limit {MAX_PROMPT_MISMATCH_RATE:.0%}), so nothing is extracted. {PROMPT_DRIFT_FIX}[{partition}]."
        )


def select_rows(
    sequences_file: Path, storage_root: Path, partition: str, splits: Sequence[str] = (), *, model_path: Path
) -> pa.Table:
    """The ``token_sequences`` rows to extract: all of them, or those whose prompt the partition's
    current prompts table puts in one of ``splits``; refused (:func:`check_made_for_verifier`) unless they
    were made for the verifier folder ``model_path``."""
    if not sequences_file.exists():
        raise HiddenStatesInputError(f"{sequences_file} is missing: materialize token_sequences[{partition}] first")
    check_made_for_verifier(sequences_file, model_path, partition)
    rows = pq.read_table(sequences_file, columns=SEQUENCE_COLUMNS)
    if not splits:
        return rows
    try:
        current = read_current_splits(storage_root, partition)
    except FileNotFoundError as err:
        raise HiddenStatesInputError(str(err)) from None
    keep = [current.get(pid, ("", ""))[0] in splits for pid in rows["prompt_id"].to_pylist()]
    return rows.filter(pa.array(keep, pa.bool_()))


def check_disk_budget(folder: Path, tokens: int, files: int, per_token: int, headroom_gb: float) -> int:
    """Fail fast, with the numbers, when the write cannot fit; returns the estimate in bytes (the
    capacity plan's arithmetic: ``eagle-assets plan`` prints the same per-token and per-file bytes)."""
    needed = tokens * per_token + files * FILE_OVERHEAD_BYTES
    free = shutil.disk_usage(folder).free
    if free - needed < headroom_gb * GB:
        raise NotEnoughDisk(
            f"not enough disk for hidden states under {folder}: {files} files, {tokens} tokens x "
            f"{per_token} bytes/token = {needed / GB:.2f} GB needed + {headroom_gb:.2f} GB headroom, "
            f"but only {free / GB:.2f} GB free. Free space, point the storage root at a bigger disk, "
            "capture fewer layers, or select fewer splits/rows.",
            {"needed_bytes": needed, "free_bytes": free, "headroom_gb": headroom_gb, "tokens": tokens},
        )
    return needed


@dataclass(frozen=True)
class ExtractionSettings:
    """What an extraction takes from the verifier resource and the launchpad."""

    model_path: Path
    devices: list[str]  # one worker per entry (resolved: no "auto")
    aux_layer_ids: list[int] | None = None  # None: the backend's defaults
    feature_dtype: str = BF16
    device: str = "auto"
    dtype: str = "auto"
    batch_tokens: int = 16384
    disk_headroom_gb: float = 2.0
    engine_args: dict = field(default_factory=dict)  # the backend's engine, if it has one


@dataclass(frozen=True)
class Extraction:
    """What one extraction found, wrote and indexed."""

    folder: Path  # the version folder: index.parquet + manifest.json
    rows: int
    files: int  # distinct content ids over the rows
    files_written: int
    tokens: int
    new_tokens: int
    bytes_written: int
    bytes_per_token: int
    elapsed_s: float
    layer_ids: list[int]
    hidden_size: int
    identity: str
    feature_dtype: str
    workers: int
    engine_facts: dict  # what the backend reported about its extraction (vllm: its engine's start-up time)
    data_version: str

    @property
    def files_reused(self) -> int:
        return self.files - self.files_written

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.elapsed_s if self.new_tokens else 0.0


@dataclass(frozen=True)
class ExtractionProgress:
    files: int
    tokens: int
    total_files: int
    total_tokens: int
    elapsed_s: float


class ProgressLog:
    """A progress callback that logs counts and rates every few seconds, and at the end."""

    def __init__(self, log, every_s: float = LOG_EVERY_S):
        self.log, self.every_s, self.last = log, every_s, None

    def __call__(self, progress: ExtractionProgress) -> None:
        now = time.monotonic()
        if self.last is None:
            self.last = now - progress.elapsed_s  # the extraction's start
        if now - self.last >= self.every_s or progress.files == progress.total_files:
            self.last = now
            rate = progress.tokens / max(progress.elapsed_s, 1e-9)
            self.log.info(
                f"hidden states: {progress.files}/{progress.total_files} files, "
                f"{progress.tokens}/{progress.total_tokens} tokens, {rate:.0f} tok/s"
            )


def extract_hidden_states(
    rows: pa.Table,
    folder: Path,
    backend: VerifierBackend,
    settings: ExtractionSettings,
    log,
    progress: Callable[[ExtractionProgress], None] | None = None,
    label: str = "",
) -> Extraction:
    """Extract every row of ``rows`` (:func:`select_rows`) not on disk yet into the partition ``folder``
    (created), then publish its index and manifest as a new version. Raises :class:`NotEnoughDisk` before
    the verifier is loaded when the write would not fit. ``log`` is logger-like (``info``); ``label``
    prefixes its summary lines."""
    model_path = settings.model_path
    layer_ids = backend.capture_layer_ids(model_path, settings.aux_layer_ids or None)
    hidden_size, identity = backend.hidden_size(model_path), backend.identity(model_path)
    folder.mkdir(parents=True, exist_ok=True)
    stale = remove_stale_temporaries(folder / TENSORS_DIR) if (folder / TENSORS_DIR).exists() else 0

    input_ids = list_rows(rows["input_ids"])
    feature_dtype = settings.feature_dtype
    cids = [content_id(ids, identity, layer_ids, feature_dtype) for ids in input_ids]
    todo: dict[str, int] = {}  # content id -> first row holding it (identical rows share one file)
    for row, cid in enumerate(cids):
        if cid not in todo and not (folder / relative_path(cid)).exists():
            todo[cid] = row
    per_token = feature_bytes_per_token(len(layer_ids), hidden_size, feature_dtype)
    todo_tokens = sum(len(input_ids[r]) for r in todo.values())
    estimate = check_disk_budget(folder, todo_tokens, len(todo), per_token, settings.disk_headroom_gb)
    log.info(
        f"{label}: {rows.num_rows} rows, {len(set(cids))} distinct, {len(todo)} to extract "
        f"({todo_tokens} tokens, ~{estimate / GB:.2f} GB) with backend {backend.name!r} on {settings.devices}, "
        f"layers {layer_ids}, stored {feature_dtype}; "
        f"{stale} stale temporaries removed"
    )

    writer = SampleWriter(folder, len(layer_ids), hidden_size, feature_dtype)
    started = time.monotonic()
    engine_facts = None
    if todo:
        request = ExtractionRequest(
            sequences=[((row, cid), input_ids[row]) for cid, row in todo.items()],
            layer_ids=layer_ids,
            device=settings.device,
            dtype=settings.dtype,
            batch_tokens=settings.batch_tokens,
            scratch_dir=str(folder / SCRATCH_DIR),
            engine_args=settings.engine_args,
        )

        def report(files: int, tokens: int) -> None:
            if progress is not None:
                progress(ExtractionProgress(files, tokens, len(todo), todo_tokens, time.monotonic() - started))

        engine_facts = extract_on_devices(backend, model_path, request, settings.devices, writer, report, log=log)
    elapsed = time.monotonic() - started

    hashes = indexed_hashes(folder)
    hashes.update({cid: w.sha256 for (_, cid), w in writer.written.items()})
    for cid in set(cids) - hashes.keys():  # finished by a killed extraction that never published its index
        hashes[cid] = file_sha256(folder / relative_path(cid))
    tokens = sum(rows["seq_len"].to_pylist())
    manifest = manifest_of(backend.describe(model_path), layer_ids, hidden_size, feature_dtype, len(set(cids)), tokens)
    published, data_version = publish_index(folder, index_table(rows, cids, hashes), manifest)

    new_tokens = sum(len(input_ids[row]) for row, _ in writer.written)
    log.info(
        f"{label}: wrote {len(writer.written)} files ({new_tokens} tokens) in {elapsed:.1f}s; "
        f"reused {len(set(cids)) - len(writer.written)}"
    )
    return Extraction(
        folder=published,
        rows=rows.num_rows,
        files=len(set(cids)),
        files_written=len(writer.written),
        tokens=tokens,
        new_tokens=new_tokens,
        bytes_written=writer.bytes,
        bytes_per_token=per_token,
        elapsed_s=elapsed,
        layer_ids=layer_ids,
        hidden_size=hidden_size,
        identity=identity,
        feature_dtype=feature_dtype,
        workers=len(settings.devices),
        engine_facts=dict(engine_facts or {}),
        data_version=data_version,
    )
