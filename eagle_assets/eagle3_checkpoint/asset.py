"""The ``eagle3_checkpoint`` asset: an EAGLE-3 draft trained by speculators on the verifier's own outputs.

It reads the files of ``token_sequences`` and ``hidden_states`` (all partitions, or a chosen subset)
straight from storage, lays out a speculators training folder that links to the tensors, picks the
draft vocabulary from supervised-token frequencies, runs speculators' trainer in a child process
(CPU adaptations only where there is no GPU), and keeps the best epoch by validation loss on the
prompts' ``validation`` split (train rows are the ``train`` split; ``heldout`` is never read here). The kept folder is speculators format, which vLLM serves as an ``eagle3`` speculator.

Partitioned by named training run (``eagle_assets.orchestration.partitions.training_runs``): each run keeps its own
checkpoints, history and evaluations. A run's *recipe* (the training settings and chosen partitions of
its launchpad config) is fixed by its first materialization: it is recorded in the materialization's
metadata, in ``training.json`` and in ``lineage.json``, and a re-materialization of the same run with
another recipe is refused, so the same key always means the same recipe. A new recipe is a new run.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import json
import time
from pathlib import Path

import dagster as dg
from pydantic import Field

from eagle_assets.capacity import asset_plan_metadata, shape_of
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    HIDDEN_STATES,
    INDEX_FILE,
    PIPELINE,
    PROMPTS,
    SEQUENCES_FILE,
    TOKEN_SEQUENCES,
    TRAINING_FILE,
    WORK_DIR,
)
from eagle_assets.core.partitions import training_runs
from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.checks import (
    learned_check_result,
    loads_check_result,
    matches_verifier_check_result,
)
from eagle_assets.eagle3_checkpoint.saved import (
    keep_checkpoint,
    speculators_load_problems,
    verifier_facts,
    verifier_mismatches,
)
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings
from eagle_assets.eagle3_checkpoint.training_data import FeatureManifest, TrainingDataError, build_training_data
from eagle_assets.eagle3_checkpoint.verifier_folder import training_verifier
from eagle_assets.eagle3_checkpoint.vocab import DraftVocabError, build_draft_vocab
from eagle_assets.lineage.collect import lineage_for_checkpoint
from eagle_assets.lineage.record import LINEAGE_DIGEST_KEY, write_lineage
from eagle_assets.lineage.render import lineage_metadata
from eagle_assets.resources import StorageRoot, Verifier

# prompts: its current table says which rows are train and which validation (eagle_assets.prompts.splits).
UPSTREAM = (PROMPTS, TOKEN_SEQUENCES, HIDDEN_STATES)
# Bump when the same inputs and settings would train a different checkpoint.
CODE_VERSION = "eagle3_checkpoint-3"
# First-proposal validation accuracy a draft must reach. EAGLE-3 drafts of production verifiers sit
# around 0.7-0.8; the demo's tiny-verifier draft reaches 0.94 (see DEMO_OPS), random features ~0.01.
MIN_VAL_ACCURACY = 0.5
RECIPE_KEY = "recipe"


class Eagle3TrainingConfig(dg.Config, TrainingSettings):
    """Launchpad settings of `eagle3_checkpoint`: which partitions to train on, and the draft recipe."""

    partitions: list[str] = Field(
        default_factory=list,
        description="Dataset partitions to train on (their train split; their validation split picks the best epoch); empty = every partition whose "
        "token_sequences and hidden_states are materialized.",
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


def _available(root: Path, partition: str) -> bool:
    return (root / "token_sequences" / partition / SEQUENCES_FILE).exists() and (
        root / "hidden_states" / partition / INDEX_FILE
    ).exists()


def _choose_partitions(config: Eagle3TrainingConfig, all_keys: list[str], root: Path, log) -> list[str]:
    if config.partitions:
        unknown = sorted(set(config.partitions) - set(all_keys))
        if unknown:
            raise dg.Failure(f"partitions {unknown} are not registered dataset sources; known: {all_keys}")
        return list(config.partitions)
    chosen = [p for p in all_keys if _available(root, p)]
    skipped = sorted(set(all_keys) - set(chosen))
    if skipped:
        log.info(f"partitions without materialized token_sequences/hidden_states, not used: {skipped}")
    if not chosen:
        raise dg.Failure("no partition has materialized token_sequences and hidden_states: materialize them first")
    return chosen


def recipe_of(config: Eagle3TrainingConfig) -> dict:
    """What a training run's name stands for: its training settings and the partitions it was told to read."""
    return {**_settings(config).model_dump(), "partitions": list(config.partitions)}


def recipe_changes(recorded: dict, recipe: dict) -> list[str]:
    """``field: recorded -> now`` for each setting both recipes hold that differs (a setting added to the
    code after the run was recorded is not a change of the run's recipe)."""
    return [
        f"{name}: {recorded[name]!r} -> {recipe[name]!r}"
        for name in sorted(set(recorded) & set(recipe))
        if recorded[name] != recipe[name]
    ]


def latest_record(instance: dg.DagsterInstance, run: str) -> dg.EventLogRecord | None:
    """The latest ``eagle3_checkpoint`` materialization of the training run ``run``."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(EAGLE3_CHECKPOINT), asset_partitions=[run]), limit=1
    ).records
    return records[0] if records else None


def checkpoint_of(instance: dg.DagsterInstance, run: str) -> Path:
    """The folder of the training run ``run``'s latest checkpoint (its ``path`` metadata)."""
    record = latest_record(instance, run)
    if record is None:
        raise dg.Failure(
            f"training run {run!r} has no {EAGLE3_CHECKPOINT} yet: materialize {EAGLE3_CHECKPOINT} for partition {run!r} first"
        )
    return Path(record.asset_materialization.metadata["path"].value)


def _check_recipe(instance: dg.DagsterInstance, run: str, recipe: dict) -> None:
    record = latest_record(instance, run)
    recorded = record.asset_materialization.metadata.get(RECIPE_KEY) if record else None
    if recorded is None:
        return
    if changes := recipe_changes(recorded.value, recipe):
        raise dg.Failure(
            f"training run {run!r} was trained with another recipe ({'; '.join(changes)}): a run name stands for one "
            f"recipe, so its checkpoints stay comparable. Add a new training run for this recipe (launchpad: "
            f"'Add partition', or `eagle-assets add-training-run NAME`), or launch {run!r} with its recorded settings "
            "(`eagle-assets checkpoints` and the run's metadata show them)"
        )


def _features_of(checkpoint: Path, root: Path) -> list[FeatureManifest]:
    partitions = json.loads((checkpoint / TRAINING_FILE).read_text())["data"]["partitions"]
    return [FeatureManifest.read(root / "hidden_states" / p) for p in partitions]


def plan_metadata(root: Path, chosen: list[str], manifest: FeatureManifest, model_path: Path, text_config, log) -> dict:
    """The capacity plan's numbers for the kept checkpoint, or none and a warning: the checkpoint is
    written by then, and a plan that cannot be made must not fail its run."""
    try:
        shape = shape_of(str(model_path), text_config, manifest.layer_ids)
        return asset_plan_metadata(root, chosen, EAGLE3_CHECKPOINT, feature_dtype=manifest.dtype, shape=shape)
    # OSError: a stored file the plan stats or reads (unreadable tables are skipped inside already);
    # ValueError: a verifier config the plan cannot read (ShapeError) or a malformed number in it.
    except (OSError, ValueError) as exc:
        log.warning(f"capacity plan metadata left out, the checkpoint is kept: {exc!r}")
        return {}


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
        settings = _settings(config)
        chosen = _choose_partitions(config, partitions.get_partition_keys(), root, context.log)
        work = storage.path(EAGLE3_CHECKPOINT) / WORK_DIR
        try:
            data = build_training_data(root, chosen, work, log=context.log)
        except TrainingDataError as err:
            raise dg.Failure(str(err)) from err
        manifest = data.manifest
        model_path, backend = verifier.resolved_model_path(), verifier.get_backend()
        if manifest.verifier_id != verifier.identity():
            raise dg.Failure(
                f"hidden_states of {chosen} were captured from verifier {manifest.verifier_path} (identity "
                f"{manifest.verifier_id}), but the verifier resource is {model_path} (identity {verifier.identity()}): "
                "re-materialize hidden_states, or point verifier.model_path at the captured verifier"
            )
        text_config = backend.text_config(model_path)  # the decoder's: for the settings and the capacity plan
        settings, resolved = resolve_settings(settings, VerifierShape.of(text_config))
        for name, how in resolved.items():
            context.log.info(f"{name} unset: {how}")
        context.log.info(
            f"training data: {data.num_rows} rows ({data.num_tokens} tokens, {data.num_supervised_tokens} "
            f"supervised) from {chosen}; verifier {model_path}, aux layers {manifest.aux_layer_ids}"
        )
        vocab_size = backend.vocab_size(model_path)
        try:
            vocab = build_draft_vocab(data.path, settings.draft_vocab_size, vocab_size, log=context.log)
        except DraftVocabError as err:
            raise dg.Failure(str(err)) from err
        context.log.info(
            f"draft vocabulary: {vocab.size} of {vocab_size} tokens, covering {vocab.coverage:.1%} of supervised tokens"
        )
        # A nested (Kimi-K2.5) config is resolved into a plain decoder folder speculators can read.
        trained_against = training_verifier(backend, model_path, work)
        run = trainer.train(data, vocab, str(trained_against), settings, work, context.log)
        summary = run.summary
        training = {
            "training_run": run_name,
            "recipe": recipe,
            "settings": settings.model_dump(),
            "resolved_from_verifier": resolved,
            "code_version": CODE_VERSION,
            "data": {
                "partitions": chosen,
                "folder": str(data.path),
                "content_hash": data.content_hash,
                "rows": data.num_rows,
                "validation_rows": data.num_validation_rows,
                "tokens": data.num_tokens,
                "supervised_tokens": data.num_supervised_tokens,
                "skipped_without_hidden_states": data.skipped_without_hidden_states,
                "skipped_unsupervised": data.skipped_unsupervised,
            },
            "vocab": {
                "size": vocab.size,
                "coverage": vocab.coverage,
                "distinct_supervised_tokens": vocab.distinct_supervised_tokens,
            },
            "verifier": {
                "path": str(model_path),
                "backend": backend.name,
                "identity": manifest.verifier_id,
                "layer_ids": manifest.layer_ids,
                "hidden_size": manifest.hidden_size,
            },
            "run": {"folder": str(run.run_dir), "dagster_run_id": context.run.run_id},
            "metrics": summary,
        }
        lineage = lineage_for_checkpoint(context, root, chosen, training=training, training_folder=data.path)
        folder, digest, lineage_sha256 = keep_checkpoint(
            run.best_dir,
            storage.path(EAGLE3_CHECKPOINT),
            {TRAINING_FILE: training},
            finish=lambda tmp, model_hashes: write_lineage(tmp, lineage, model_hashes),
        )
        context.log.info(
            f"kept checkpoint {folder} (epoch {summary['best_epoch']}, val loss {summary['val_loss']:.4f}) "
            f"after {time.monotonic() - started:.0f}s"
        )
        metadata = {
            "path": dg.MetadataValue.path(str(folder)),
            "training_run": run_name,
            RECIPE_KEY: dg.MetadataValue.json(recipe),
            "partitions": ", ".join(chosen),
            "rows": data.num_rows,
            "validation_rows": data.num_validation_rows,
            "tokens": data.num_tokens,
            "supervised_tokens": data.num_supervised_tokens,
            "draft_vocab_size": vocab.size,
            "draft_vocab_coverage": round(vocab.coverage, 4),
            "top_token_share": round(vocab.top_token_share, 4),
            "min_val_accuracy": config.min_val_accuracy,
            "epochs_run": summary["epochs_run"],
            "best_epoch": summary["best_epoch"],
            "val_loss": summary["val_loss"],
            "train_loss": summary["train_loss"],
            "tokens_per_s": summary["tokens_per_s"],
            **{k: v for k, v in summary.items() if k.startswith("val_") and k != "val_loss"},
            **lineage_metadata(lineage),
            **plan_metadata(root, chosen, manifest, model_path, text_config, context.log),
            # `eagle-assets lineage verify` checks lineage.json against this (and lineage.sha256).
            LINEAGE_DIGEST_KEY: lineage_sha256,
        }
        return dg.MaterializeResult(
            metadata={k: v for k, v in metadata.items() if v is not None},
            data_version=dg.DataVersion(digest[:16]),
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
        folder = checkpoint_of(context.instance, context.partition_key)
        return loads_check_result(folder, *speculators_load_problems(folder))

    @dg.asset_check(
        asset=eagle3_checkpoint,
        blocking=True,
        partitions_def=runs,
        description="Training learned: the draft's first-proposal validation accuracy is at least "
        "min_val_accuracy and beats always proposing the most frequent supervised token.",
    )
    def learned(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        record = latest_record(context.instance, context.partition_key)
        return learned_check_result(
            {k: v.value for k, v in record.asset_materialization.metadata.items()} if record else {}
        )

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
        folder = checkpoint_of(context.instance, context.partition_key)
        facts = verifier_facts(verifier.get_backend(), verifier.resolved_model_path())
        problems = []
        for manifest in _features_of(folder, Path(storage.root)):
            problems += verifier_mismatches(folder, facts, manifest)
        return matches_verifier_check_result(folder, problems)

    return {"assets": [eagle3_checkpoint], "checks": [loads_with_speculators, learned, matches_verifier]}
