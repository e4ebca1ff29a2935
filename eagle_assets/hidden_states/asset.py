"""The ``hidden_states`` asset: the verifier's auxiliary + final hidden states for every training row,
one content-addressed safetensors file per distinct row, in speculators' on-disk format."""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import json
import random
import shutil
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from eagle_assets.backends import ExtractionRequest
from eagle_assets.capacity import asset_plan_metadata, feature_bytes_per_token, shape_of
from eagle_assets.capacity.plan import FILE_OVERHEAD_BYTES
from eagle_assets.core.checks import check_result
from eagle_assets.core.files import combined_hash, file_sha256, remove_stale_temporaries, write_json, write_parquet
from eagle_assets.core.layout import FP8, INDEX_FILE, MANIFEST_FILE, PIPELINE, SCRATCH_DIR, SEQUENCES_FILE, TENSORS_DIR
from eagle_assets.core.tables import list_rows
from eagle_assets.hidden_states.files import (
    INDEX_SCHEMA,
    SCALES_KEY,
    SampleWriter,
    content_id,
    load_sample,
    relative_path,
)
from eagle_assets.hidden_states.parallel import extract_on_devices
from eagle_assets.prompts.splits import read_current_splits
from eagle_assets.resources import StorageRoot, Verifier

# Bump when the files this asset writes for the same input would change.
CODE_VERSION = "hidden_states-3"
LOG_EVERY_S = 5.0
GB = 1e9
CHECK_SAMPLE = 16
FORMATS = {
    "bfloat16": "speculators: hidden_states [seq, n_aux+1, H] bf16 + token_ids [seq] int64",
    FP8: "hs-connectors fp8 (speculators' `fp8` backend): hidden_states [seq, n_aux+1, H] float8_e4m3fn + "
    f"{SCALES_KEY} [seq, 1, 1] fp32 (per token) + token_ids [seq] int64",
}


class HiddenStatesConfig(dg.Config):
    """Launchpad settings of the `hidden_states` asset."""

    splits: list[str] = Field(
        default_factory=list,
        description="Only rows of these splits, as the current prompts table assigns them "
        "(e.g. ['train', 'validation'], what the checkpoint reads); empty = every token_sequences row.",
    )
    disk_headroom_gb: float = Field(
        default=2.0,
        ge=0.0,
        description="Free space (GB) that must remain after the estimated write; the run fails before "
        "loading the model when the disk is shorter than estimate + headroom.",
    )


def check_disk_budget(folder: Path, tokens: int, files: int, per_token: int, headroom_gb: float) -> int:
    """Fail fast, with the numbers, when the write cannot fit; returns the estimate in bytes (the
    capacity plan's arithmetic: ``eagle-assets plan`` prints the same per-token and per-file bytes)."""
    needed = tokens * per_token + files * FILE_OVERHEAD_BYTES
    free = shutil.disk_usage(folder).free
    if free - needed < headroom_gb * GB:
        raise dg.Failure(
            description=(
                f"not enough disk for hidden states under {folder}: {files} files, {tokens} tokens x "
                f"{per_token} bytes/token = {needed / GB:.2f} GB needed + {headroom_gb:.2f} GB headroom, "
                f"but only {free / GB:.2f} GB free. Free space, point the storage root at a bigger disk, "
                "capture fewer layers, or select fewer splits/rows."
            ),
            metadata={"needed_bytes": needed, "free_bytes": free, "headroom_gb": headroom_gb, "tokens": tokens},
        )
    return needed


def _previous_hashes(folder: Path) -> dict[str, str]:
    """sha256 of files an earlier run already indexed (so a resume does not re-read them)."""
    index = folder / INDEX_FILE
    if not index.exists():
        return {}
    table = pq.read_table(index, columns=["content_id", "sha256"])
    return dict(zip(table["content_id"].to_pylist(), table["sha256"].to_pylist()))


class _Progress:
    """``context.log.info`` every few seconds with counts and rates."""

    def __init__(self, log, total_samples: int, total_tokens: int):
        self.log, self.total_samples, self.total_tokens = log, total_samples, total_tokens
        self.started = self.last = time.monotonic()

    def __call__(self, samples: int, tokens: int) -> None:
        now = time.monotonic()
        if now - self.last >= LOG_EVERY_S or samples == self.total_samples:
            self.last = now
            rate = tokens / max(now - self.started, 1e-9)
            self.log.info(
                f"hidden states: {samples}/{self.total_samples} files, {tokens}/{self.total_tokens} tokens, "
                f"{rate:.0f} tok/s"
            )


def build(partitions: dg.PartitionsDefinition) -> dict:
    @dg.asset(
        name="hidden_states",
        partitions_def=partitions,
        deps=["token_sequences"],
        group_name=PIPELINE,
        kinds={"pytorch", "safetensors"},
        code_version=CODE_VERSION,
        pool="gpu",
    )
    def hidden_states(
        context: dg.AssetExecutionContext, config: HiddenStatesConfig, storage: StorageRoot, verifier: Verifier
    ) -> dg.MaterializeResult:
        """The verifier's hidden states for every `token_sequences` row, the features the draft trains on.

        Per row, the auxiliary layers (backend default `[2, n//2, n-3]`) and the final layer before
        its norm, `[seq, n_aux+1, H]`, plus the row's token ids: one safetensors file per distinct
        (tokens, verifier, layers, storage dtype) content id, in speculators' on-disk format.

        - **dtype**: bf16, or fp8 with `verifier.feature_dtype: fp8` (hs-connectors' format: e4m3
          states + one fp32 scale per token, half the bytes, read by speculators' `fp8` backend).
        - **resumable**: files are written atomically and never rewritten, so a killed run resumes
          by skipping what exists; `index.parquet` maps rows to files, `manifest.json` records the
          verifier.
        - **several GPUs**: one worker process per device in `verifier.devices` extracts a share of
          the rows; the files and index are the same.
        - **disk**: the write is estimated first; the run fails before loading the model when free
          space is short of estimate + `disk_headroom_gb`.
        """
        partition = context.partition_key
        source = storage.path("token_sequences", partition) / SEQUENCES_FILE
        if not source.exists():
            raise dg.Failure(description=f"{source} is missing: materialize token_sequences[{partition}] first")
        rows = pq.read_table(source, columns=["prompt_id", "turn", "input_ids", "seq_len"])
        if config.splits:
            try:
                current = read_current_splits(storage.root, partition)
            except FileNotFoundError as err:
                raise dg.Failure(description=str(err)) from None
            keep = [current.get(pid, ("", ""))[0] in config.splits for pid in rows["prompt_id"].to_pylist()]
            rows = rows.filter(pa.array(keep, pa.bool_()))
        backend, model_path = verifier.get_backend(), verifier.resolved_model_path()
        try:
            devices = verifier.extraction_devices()
        except ValueError as err:
            raise dg.Failure(description=str(err)) from err
        layer_ids = backend.capture_layer_ids(model_path, verifier.aux_layer_ids or None)
        hidden_size, identity = backend.hidden_size(model_path), backend.identity(model_path)
        folder = storage.path("hidden_states", partition)
        stale = remove_stale_temporaries(folder / TENSORS_DIR) if (folder / TENSORS_DIR).exists() else 0

        input_ids = list_rows(rows["input_ids"])
        feature_dtype = verifier.feature_dtype
        cids = [content_id(ids, identity, layer_ids, feature_dtype) for ids in input_ids]
        todo: dict[str, int] = {}  # content id -> first row holding it (identical rows share one file)
        for row, cid in enumerate(cids):
            if cid not in todo and not (folder / relative_path(cid)).exists():
                todo[cid] = row
        per_token = feature_bytes_per_token(len(layer_ids), hidden_size, feature_dtype)
        todo_tokens = sum(len(input_ids[r]) for r in todo.values())
        estimate = check_disk_budget(folder, todo_tokens, len(todo), per_token, config.disk_headroom_gb)
        context.log.info(
            f"{partition}: {rows.num_rows} rows, {len(set(cids))} distinct, {len(todo)} to extract "
            f"({todo_tokens} tokens, ~{estimate / GB:.2f} GB) with backend {backend.name!r} on {devices}, "
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
                device=verifier.device,
                dtype=verifier.dtype,
                batch_tokens=verifier.batch_tokens,
                scratch_dir=str(folder / SCRATCH_DIR),
            )
            # What a backend reports about its run (the vllm backend: its engine's start-up time).
            engine_facts = extract_on_devices(
                backend,
                model_path,
                request,
                devices,
                writer,
                _Progress(context.log, len(todo), todo_tokens),
                log=context.log,
            )
        elapsed = time.monotonic() - started

        hashes = _previous_hashes(folder)
        hashes.update({cid: w.sha256 for (_, cid), w in writer.written.items()})
        for cid in set(cids) - hashes.keys():  # finished by a killed run that never wrote its index
            hashes[cid] = file_sha256(folder / relative_path(cid))
        index = pa.table(
            {
                "prompt_id": rows["prompt_id"],
                "turn": rows["turn"],
                "content_id": cids,
                "file": [relative_path(c) for c in cids],
                "seq_len": rows["seq_len"],
                "sha256": [hashes[c] for c in cids],
            },
            schema=INDEX_SCHEMA,
        )
        write_parquet(index, folder / INDEX_FILE)
        description = backend.describe(model_path)
        write_json(
            {
                "verifier": description,
                "layer_ids": layer_ids,
                "aux_layer_ids": layer_ids[:-1],
                "final_layer_id": layer_ids[-1],
                "hidden_size": hidden_size,
                "dtype": feature_dtype,
                "format": FORMATS[feature_dtype],
                "files": len(set(cids)),
                "tokens": sum(rows["seq_len"].to_pylist()),
            },
            folder / MANIFEST_FILE,
        )

        new_tokens = sum(len(input_ids[row]) for row, _ in writer.written)
        all_tokens = sum(rows["seq_len"].to_pylist())
        context.log.info(
            f"{partition}: wrote {len(writer.written)} files ({new_tokens} tokens) in {elapsed:.1f}s; "
            f"reused {len(set(cids)) - len(writer.written)}"
        )
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": index.num_rows,
                "tokens": all_tokens,
                "new_tokens": new_tokens,
                "files": len(set(cids)),
                "files_written": len(writer.written),
                "files_reused": len(set(cids)) - len(writer.written),
                "bytes_per_token": per_token,
                "feature_dtype": feature_dtype,
                "bytes_written": writer.bytes,
                "tokens_per_s": new_tokens / elapsed if new_tokens else 0.0,
                "layer_ids": dg.MetadataValue.json(layer_ids),
                "hidden_size": hidden_size,
                "backend": backend.name,
                **(engine_facts or {}),
                "extraction_workers": len(devices),
                "verifier_identity": identity,
                "path": dg.MetadataValue.path(str(folder)),
                **asset_plan_metadata(
                    storage.root,
                    [partition],
                    "hidden_states",
                    feature_dtype=feature_dtype,
                    shape=shape_of(str(model_path), backend.text_config(model_path), layer_ids),
                ),
            },
            data_version=dg.DataVersion(combined_hash(f"{c}:{hashes[c]}" for c in sorted(set(cids)))[:16]),
        )

    @dg.asset_check(
        asset=hidden_states,
        name="files_match_rows",
        partitions_def=partitions,
        additional_deps=["token_sequences"],
        description="A random sample of indexed files still has its recorded sha256, holds exactly its "
        "row's token ids (what speculators compares before training) and is stored in the manifest's dtype.",
    )
    def files_match_rows(context: dg.AssetCheckExecutionContext, storage: StorageRoot) -> dg.AssetCheckResult:
        partition = context.partition_key
        folder = storage.path("hidden_states", partition)
        index = pq.read_table(folder / INDEX_FILE, columns=INDEX_SCHEMA.names).to_pylist()
        dtype = json.loads((folder / MANIFEST_FILE).read_text())["dtype"]
        rows = pq.read_table(
            storage.path("token_sequences", partition) / SEQUENCES_FILE, columns=["prompt_id", "turn", "input_ids"]
        )
        tokens = dict(zip(zip(rows["prompt_id"].to_pylist(), rows["turn"].to_pylist()), list_rows(rows["input_ids"])))
        problems, checked = [], min(CHECK_SAMPLE, len(index))
        for entry in random.Random(0).sample(index, checked):
            path = folder / entry["file"]
            if not path.exists():
                problems.append(f"{entry['file']} ({entry['prompt_id']}) is missing")
            elif file_sha256(path) != entry["sha256"]:
                problems.append(f"{entry['file']} ({entry['prompt_id']}) changed since it was indexed")
            elif (sample := load_sample(path))["token_ids"].tolist() != tokens.get(
                (entry["prompt_id"], entry["turn"]), np.zeros(0)
            ).tolist():
                problems.append(f"{entry['file']} holds other tokens than row {entry['prompt_id']} of token_sequences")
            elif (SCALES_KEY in sample) != (dtype == FP8):
                problems.append(f"{entry['file']} is not stored as {dtype}, the dtype manifest.json records")
        return check_result(
            not problems,
            {
                "checked": checked,
                "problems": len(problems),
                "examples": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:10]) or "none"),
            },
            failed=f"{len(problems)} of {checked} sampled files do not match their index row, e.g. "
            f"{problems[0] if problems else ''}",
            fix="delete the files `examples` names (a missing one needs nothing), then re-materialize "
            "hidden_states for this partition: it re-extracts every missing file",
        )

    return {"assets": [hidden_states], "checks": [files_match_rows]}
