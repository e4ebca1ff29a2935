"""The ``eagle3_checkpoint`` asset: an EAGLE-3 draft trained by speculators on the verifier's own outputs.

It reads the files of ``token_sequences`` and ``hidden_states`` (all partitions, or a chosen subset)
straight from storage, lays out a speculators training folder that links to the tensors, picks the
draft vocabulary from supervised-token frequencies, runs speculators' trainer in a child process
(CPU adaptations only where there is no GPU), and keeps the best epoch by validation loss on the
prompts' ``validation`` split (train rows are the ``train`` split; ``heldout`` is never read here).
The kept folder is speculators format, which vLLM serves as an ``eagle3`` speculator.

Partitioned by named training run (``eagle_assets.core.partitions.training_runs``): each run keeps its own
checkpoints, history and evaluations. A run's *recipe* (the training settings and chosen partitions of
its launchpad config) is fixed by its first materialization: it is recorded in the materialization's
metadata, in ``training.json`` and in ``lineage.json``, and a re-materialization of the same run with
another recipe is refused, so the same key always means the same recipe. A new recipe is a new run.

Dagster wiring only: the stage is :mod:`~eagle_assets.eagle3_checkpoint.training`, the checks'
verdicts :mod:`~eagle_assets.eagle3_checkpoint.checks`.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import time
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from eagle_assets.capacity import DEFAULT_SCRATCH_CAP_GB
from eagle_assets.capacity.plan import ONLINE, STORED
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, HIDDEN_STATES, PIPELINE, PROMPTS, TOKEN_SEQUENCES, WORK_DIR
from eagle_assets.core.partitions import latest_checkpoint, latest_metadata, training_runs
from eagle_assets.eagle3_checkpoint.checks import (
    learned_check_result,
    loads_check_result,
    matches_verifier_check_result,
)
from eagle_assets.eagle3_checkpoint.online_devices import DeviceSplitError, split_devices, visible_gpus
from eagle_assets.eagle3_checkpoint.online_features import OnlineSpec
from eagle_assets.eagle3_checkpoint.saved import speculators_load_problems
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.training import (
    CheckpointTrainingError,
    KeptCheckpoint,
    TrainingPlan,
    choose_partitions,
    plan_metadata,
    plan_training,
    recipe_changes,
    recipe_refusal,
    train_and_keep,
    verifier_problems,
)
from eagle_assets.lineage.collect import lineage_for_checkpoint
from eagle_assets.lineage.record import LINEAGE_DIGEST_KEY
from eagle_assets.lineage.render import lineage_metadata
from eagle_assets.resources import StorageRoot, Verifier

# prompts: its current table says which rows are train and which validation (eagle_assets.prompts.splits).
UPSTREAM = (PROMPTS, TOKEN_SEQUENCES, HIDDEN_STATES)
# Bump when the same inputs and settings would train a different checkpoint.
CODE_VERSION = "eagle3_checkpoint-5"
# First-proposal validation accuracy a draft must reach. EAGLE-3 drafts of production verifiers sit
# around 0.7-0.8; the demo's tiny-verifier draft reaches 0.94 (see DEMO_OPS), random features ~0.01.
MIN_VAL_ACCURACY = 0.5
RECIPE_KEY = "recipe"


class Eagle3TrainingConfig(dg.Config, TrainingSettings):
    """Launchpad settings of `eagle3_checkpoint`: which partitions to train on, and the draft recipe."""

    partitions: list[str] = Field(
        default_factory=list,
        description="Dataset partitions to train on (their train split; their validation split picks the best "
        "epoch); empty = every partition whose token_sequences and hidden_states are materialized.",
    )
    features: Literal["stored", "online"] = Field(
        default=STORED,
        description="Where the hidden states come from: stored = the hidden_states materializations; online = a "
        "vLLM extract_hidden_states server started for the run computes them from token_sequences while the "
        "trainer runs (again every epoch; stored files are used where they exist), written to a scratch "
        "folder and deleted once loaded. Online needs a vLLM verifier backend (vllm, kimi).",
    )
    scratch_cap_gb: float = Field(
        default=DEFAULT_SCRATCH_CAP_GB,
        gt=0,
        description="features: online: the most the server's scratch folder may hold (GB = 1e9 bytes); the "
        "server waits for the trainer to delete files rather than exceed it. At least the longest row's features.",
    )
    server_devices: list[int] = Field(
        default=[],
        description="features: online: CUDA GPUs of the extraction server (its tensor parallelism spans them unless "
        "the verifier sets one); empty = those trainer_devices leave, else every GPU (shared with the trainer).",
    )
    trainer_devices: list[int] = Field(
        default=[],
        description="features: online: CUDA GPUs of the trainer (num_processes 0 = one process on each); empty = "
        "those server_devices leave, else every GPU. On shared GPUs vLLM takes 70% of each GPU's memory.",
    )
    min_val_accuracy: float = Field(
        default=MIN_VAL_ACCURACY,
        ge=0,
        le=1,
        description="Floor of the learned check: validation accuracy of the draft's first proposal "
        "(val_full_acc_0, best epoch). It must also beat always proposing the most frequent token.",
    )


def _settings(config: Eagle3TrainingConfig) -> TrainingSettings:
    return TrainingSettings(**config.model_dump(include=set(TrainingSettings.model_fields)))


def online_spec(config: Eagle3TrainingConfig, verifier: Verifier) -> OnlineSpec | None:
    """The online features' settings from the config and the verifier resource; None for stored features."""
    if config.features != ONLINE:
        return None
    return OnlineSpec(
        layer_ids=tuple(verifier.layer_ids()),
        feature_dtype=verifier.feature_dtype,
        scratch_cap_bytes=round(config.scratch_cap_gb * 1e9),
        split=split_devices(visible_gpus(), config.server_devices, config.trainer_devices),
        dtype=verifier.dtype,
        batch_tokens=verifier.batch_tokens,
        engine_args=verifier.resolved_engine_args(),
    )


def online_metadata(online: dict, generated_rows: int) -> dict:
    """An online run's metadata: the rows the server computed (each epoch) and the gpu pool's split of the
    host between the server and the trainer (empty lists: a CPU host)."""
    return {
        "features": ONLINE,
        "generated_rows": generated_rows,
        "server_devices": ", ".join(map(str, online["server_devices"])) or "cpu",
        "trainer_devices": ", ".join(map(str, online["trainer_devices"])) or "cpu",
    }


def recipe_of(config: Eagle3TrainingConfig) -> dict:
    """What a training run's name stands for: its training settings and the partitions it was told to read."""
    return {**_settings(config).model_dump(), "partitions": list(config.partitions)}


def _check_recipe(instance: dg.DagsterInstance, run: str, recipe: dict) -> None:
    recorded = (latest_metadata(instance, EAGLE3_CHECKPOINT, run) or {}).get(RECIPE_KEY)
    if recorded is not None and (changes := recipe_changes(recorded, recipe)):
        raise dg.Failure(recipe_refusal(run, changes))


def checkpoint_metadata(
    kept: KeptCheckpoint, plan: TrainingPlan, recipe: dict, min_val_accuracy: float, plan_numbers: dict
) -> dict:
    """The materialization's metadata: the recipe, data and vocabulary, the metrics, lineage and plan."""
    data, vocab, summary = plan.data, plan.vocab, kept.summary
    metadata = {
        "path": dg.MetadataValue.path(str(kept.folder)),
        "training_run": kept.training["training_run"],
        RECIPE_KEY: dg.MetadataValue.json(recipe),
        "partitions": ", ".join(plan.partitions),
        "rows": data.num_rows,
        "validation_rows": data.num_validation_rows,
        "tokens": data.num_tokens,
        "supervised_tokens": data.num_supervised_tokens,
        "draft_vocab_size": vocab.size,
        "draft_vocab_coverage": round(vocab.coverage, 4),
        "top_token_share": round(vocab.top_token_share, 4),
        "min_val_accuracy": min_val_accuracy,
        "epochs_run": summary["epochs_run"],
        "best_epoch": summary["best_epoch"],
        "val_loss": summary["val_loss"],
        "train_loss": summary["train_loss"],
        "tokens_per_s": summary["tokens_per_s"],
        **{k: v for k, v in summary.items() if k.startswith("val_") and k != "val_loss"},
        # Online: how many rows the extraction server computed (each epoch); stored runs record nothing here.
        **(online_metadata(kept.training["online_features"], data.generated_rows) if data.online else {}),
        **lineage_metadata(kept.lineage),
        **plan_numbers,
        # `eagle-assets lineage verify` checks lineage.json against this (and lineage.sha256).
        LINEAGE_DIGEST_KEY: kept.lineage_sha256,
    }
    return {k: v for k, v in metadata.items() if v is not None}


def build(partitions: dg.PartitionsDefinition) -> dict:
    all_partitions = dg.AllPartitionMapping()
    runs = training_runs()

    @dg.asset(
        name=EAGLE3_CHECKPOINT,
        partitions_def=runs,
        deps=[dg.AssetDep(name, partition_mapping=all_partitions) for name in UPSTREAM],
        kinds={"pytorch", "speculators", "safetensors"},
        group_name=PIPELINE,
        code_version=CODE_VERSION,
        pool="gpu",
    )
    def eagle3_checkpoint(
        context: dg.AssetExecutionContext, config: Eagle3TrainingConfig, storage: StorageRoot, verifier: Verifier
    ) -> dg.MaterializeResult:
        """An EAGLE-3 draft checkpoint (speculators format, vLLM `eagle3`) of one named training run, trained
        on the verifier's outputs.

        The folder holds `config.json` + `model.safetensors` (draft, frozen embedding, `d2t`/`t2d`),
        `training.json` (settings, data, metrics) and `lineage.json`. Best epoch by validation loss. The
        run's recipe is fixed by its first materialization (metadata `recipe`); the `lineage` metadata
        table lists the upstream data versions and runs it was trained from.
        """
        started = time.monotonic()
        root = Path(storage.root)
        run_name = context.partition_key
        recipe = recipe_of(config)
        _check_recipe(context.instance, run_name, recipe)
        try:
            online = online_spec(config, verifier)
        except DeviceSplitError as err:
            raise dg.Failure(str(err)) from err
        try:
            known = partitions.get_partition_keys()
            chosen = choose_partitions(config.partitions, known, root, context.log, online is not None)
            work = storage.path(EAGLE3_CHECKPOINT) / WORK_DIR
            model_path, backend = verifier.resolved_model_path(), verifier.get_backend()
            plan = plan_training(root, chosen, work, backend, model_path, _settings(config), context.log, online)
        except CheckpointTrainingError as err:
            raise dg.Failure(str(err)) from err
        kept = train_and_keep(
            plan,
            backend,
            model_path,
            work,
            storage.path(EAGLE3_CHECKPOINT),
            lambda training, folder: lineage_for_checkpoint(
                context, root, chosen, training=training, training_folder=folder
            ),
            context.log,
            training_run=run_name,
            recipe=recipe,
            code_version=CODE_VERSION,
            dagster_run_id=context.run.run_id,
            storage_root=root,
        )
        context.log.info(
            f"kept checkpoint {kept.folder} (epoch {kept.summary['best_epoch']}, val loss "
            f"{kept.summary['val_loss']:.4f}) after {time.monotonic() - started:.0f}s"
        )
        plan_numbers = plan_metadata(root, chosen, plan.data.manifest, model_path, plan.text_config, context.log)
        return dg.MaterializeResult(
            metadata=checkpoint_metadata(kept, plan, recipe, config.min_val_accuracy, plan_numbers),
            data_version=dg.DataVersion(kept.digest[:16]),
        )

    @dg.asset_check(
        asset=eagle3_checkpoint,
        blocking=True,
        partitions_def=runs,
        description="The kept checkpoint loads with speculators and holds what it should: an eagle3 "
        "config, every draft weight (finite, loaded as saved), d2t/t2d that fit the draft and verifier "
        "vocabularies, and a forward pass on a tiny batch that proposes verifier tokens.",
    )
    def loads_with_speculators(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        folder = latest_checkpoint(context.instance, context.partition_key)
        return loads_check_result(folder, *speculators_load_problems(folder))

    @dg.asset_check(
        asset=eagle3_checkpoint,
        blocking=True,
        partitions_def=runs,
        description="Training learned: the draft's first-proposal validation accuracy is at least "
        "min_val_accuracy and beats always proposing the most frequent supervised token.",
    )
    def learned(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return learned_check_result(latest_metadata(context.instance, EAGLE3_CHECKPOINT, context.partition_key) or {})

    @dg.asset_check(
        asset=eagle3_checkpoint,
        blocking=True,
        partitions_def=runs,
        description="Hidden size, aux layer ids and d2t/t2d vocab maps agree with the verifier "
        "and with the hidden_states manifests the draft was trained on.",
    )
    def matches_verifier(
        context: dg.AssetCheckExecutionContext, storage: StorageRoot, verifier: Verifier
    ) -> dg.AssetCheckResult:
        folder = latest_checkpoint(context.instance, context.partition_key)
        problems = verifier_problems(folder, Path(storage.root), verifier.get_backend(), verifier.resolved_model_path())
        return matches_verifier_check_result(folder, problems)

    return {"assets": [eagle3_checkpoint], "checks": [loads_with_speculators, learned, matches_verifier]}
