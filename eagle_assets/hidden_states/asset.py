"""The ``hidden_states`` asset: the verifier's auxiliary + final hidden states for every training row,
one content-addressed safetensors file per distinct row, in speculators' on-disk format.

Dagster wiring only: the extraction is :mod:`~eagle_assets.hidden_states.extract`, the check's
verdict :mod:`~eagle_assets.hidden_states.checks`.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
from pathlib import Path

import dagster as dg
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata, shape_of
from eagle_assets.core.layout import HIDDEN_STATES, PIPELINE, asset_folder, sequences_file
from eagle_assets.hidden_states.checks import files_match_rows_result, sampled_file_problems
from eagle_assets.hidden_states.extract import (
    Extraction,
    ExtractionSettings,
    HiddenStatesInputError,
    NotEnoughDisk,
    ProgressLog,
    extract_hidden_states,
    select_rows,
)
from eagle_assets.resources import StorageRoot, Verifier

# Bump when the files this asset writes for the same input would change.
CODE_VERSION = "hidden_states-5"


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


def materialize_result(extraction: Extraction, backend_name: str, plan: dict) -> dg.MaterializeResult:
    """The materialization of one extraction: its counts and rates, the verifier's facts, the capacity plan."""
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": extraction.rows,
            "tokens": extraction.tokens,
            "new_tokens": extraction.new_tokens,
            "files": extraction.files,
            "files_written": extraction.files_written,
            "files_reused": extraction.files_reused,
            "bytes_per_token": extraction.bytes_per_token,
            "feature_dtype": extraction.feature_dtype,
            "bytes_written": extraction.bytes_written,
            "tokens_per_s": extraction.tokens_per_s,
            "layer_ids": dg.MetadataValue.json(extraction.layer_ids),
            "hidden_size": extraction.hidden_size,
            "backend": backend_name,
            **extraction.engine_facts,
            "extraction_workers": extraction.workers,
            "verifier_identity": extraction.identity,
            "path": dg.MetadataValue.path(str(extraction.folder)),
            **plan,
        },
        data_version=dg.DataVersion(extraction.data_version),
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
          verifier: both in a version folder of their own, never rewritten (`versions/<data version>/`,
          the current one named by `current.json`), so a kept checkpoint's features stay as trained.
        - **several GPUs**: one worker process per device in `verifier.devices` extracts a share of
          the rows; the files and index are the same.
        - **disk**: the write is estimated first; the run fails before loading the model when free
          space is short of estimate + `disk_headroom_gb`.
        - **made for this verifier**: rows whose `token_sequences` record names another tokenizer, or a
          prompt drift above the `template_drift` limit, are refused before anything is loaded or written.
        """
        partition = context.partition_key
        model_path = verifier.resolved_model_path()
        try:
            rows = select_rows(
                sequences_file(storage.root, partition),
                Path(storage.root),
                partition,
                config.splits,
                model_path=model_path,
            )
        except HiddenStatesInputError as err:
            raise dg.Failure(description=str(err)) from None
        backend = verifier.get_backend()
        try:
            devices = verifier.extraction_devices()
        except ValueError as err:
            raise dg.Failure(description=str(err)) from err
        settings = ExtractionSettings(
            model_path=model_path,
            devices=devices,
            aux_layer_ids=verifier.aux_layer_ids or None,
            feature_dtype=verifier.feature_dtype,
            device=verifier.device,
            dtype=verifier.dtype,
            batch_tokens=verifier.batch_tokens,
            disk_headroom_gb=config.disk_headroom_gb,
            engine_args=verifier.resolved_engine_args(),
        )
        folder = asset_folder(storage.root, HIDDEN_STATES, partition)
        try:
            extraction = extract_hidden_states(
                rows, folder, backend, settings, context.log, ProgressLog(context.log), label=partition
            )
        except NotEnoughDisk as err:
            raise dg.Failure(description=str(err), metadata=err.metadata) from None
        plan = asset_plan_metadata(
            storage.root,
            [partition],
            HIDDEN_STATES,
            feature_dtype=extraction.feature_dtype,
            shape=shape_of(str(model_path), backend.text_config(model_path), extraction.layer_ids),
        )
        return materialize_result(extraction, backend.name, plan)

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
        checked, problems = sampled_file_problems(
            asset_folder(storage.root, HIDDEN_STATES, partition), sequences_file(storage.root, partition)
        )
        return files_match_rows_result(checked, problems)

    return {"assets": [hidden_states], "checks": [files_match_rows]}
