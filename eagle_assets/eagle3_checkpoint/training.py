"""The ``eagle3_checkpoint`` stage without Dagster: which partitions to train on, the speculators training
folder and draft vocabulary for them, the training, and the kept checkpoint with its ``training.json``
and ``lineage.json``.

A training run (the asset's partition) stands for one recipe: :func:`recipe_refusal` says why another
recipe under a recorded name is refused, so the same key always means the same recipe.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle_assets.backends import VerifierBackend
from eagle_assets.capacity import asset_plan_metadata, shape_of
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    HIDDEN_STATES,
    TRAINING_FILE,
    asset_folder,
    index_file,
    sequences_file,
)
from eagle_assets.eagle3_checkpoint import trainer
from eagle_assets.eagle3_checkpoint.online_features import (
    OnlineRun,
    OnlineSpec,
    check_scratch_cap,
    online_manifest,
    recorded_manifest,
)
from eagle_assets.eagle3_checkpoint.saved import keep_checkpoint, kept_records, verifier_facts, verifier_mismatches
from eagle_assets.eagle3_checkpoint.settings import TrainingSettings, VerifierShape, resolve_settings
from eagle_assets.eagle3_checkpoint.training_data import (
    FeatureManifest,
    TrainingData,
    TrainingDataError,
    build_training_data,
)
from eagle_assets.eagle3_checkpoint.verifier_folder import training_verifier
from eagle_assets.eagle3_checkpoint.vocab import DraftVocab, DraftVocabError, build_draft_vocab
from eagle_assets.lineage.record import lineage_key, write_lineage


class CheckpointTrainingError(ValueError):
    """The checkpoint cannot be trained from what is stored; the message says why and what to change."""


def recipe_changes(recorded: dict, recipe: dict) -> list[str]:
    """``field: recorded -> now`` for each setting both recipes hold that differs (a setting the code
    gained after the training run was recorded is not a change of the run's recipe)."""
    return [
        f"{name}: {recorded[name]!r} -> {recipe[name]!r}"
        for name in sorted(set(recorded) & set(recipe))
        if recorded[name] != recipe[name]
    ]


def recipe_refusal(training_run: str, changes: list[str]) -> str:
    """Why a recipe with ``changes`` (:func:`recipe_changes`) is not trained under ``training_run``."""
    return (
        f"training run {training_run!r} was trained with another recipe ({'; '.join(changes)}): a run name stands "
        "for one recipe, so its checkpoints stay comparable. Add a new training run for this recipe (launchpad: "
        f"'Add partition', or `eagle-assets add-training-run NAME`), or launch {training_run!r} with its recorded "
        "settings (`eagle-assets checkpoints` and the run's metadata show them)"
    )


def has_features(root: Path, partition: str, online: bool = False) -> bool:
    """Whether ``partition`` has materialized ``token_sequences`` and (unless ``online``) ``hidden_states``."""
    return sequences_file(root, partition).exists() and (online or index_file(root, partition).exists())


def choose_partitions(requested: list[str], known: list[str], root: Path, log, online: bool = False) -> list[str]:
    """``requested`` (each a registered dataset partition), or every known partition with features
    (``online``: with token_sequences)."""
    if requested:
        unknown = sorted(set(requested) - set(known))
        if unknown:
            raise CheckpointTrainingError(f"partitions {unknown} are not registered dataset sources; known: {known}")
        return list(requested)
    chosen = [p for p in known if has_features(root, p, online)]
    wanted = "token_sequences" if online else "token_sequences and hidden_states"
    skipped = sorted(set(known) - set(chosen))
    if skipped:
        log.info(f"partitions without materialized {wanted.replace(' and ', '/')}, not used: {skipped}")
    if not chosen:
        raise CheckpointTrainingError(f"no partition has materialized {wanted}: materialize them first")
    return chosen


@dataclass(frozen=True)
class TrainingPlan:
    """A training folder, the draft vocabulary and the complete settings for one checkpoint."""

    partitions: list[str]
    data: TrainingData
    vocab: DraftVocab
    settings: TrainingSettings  # every setting filled (resolve_settings)
    resolved_from_verifier: dict[str, str]  # the settings filled from the verifier's shape, and how
    text_config: object  # the verifier decoder's transformers config
    online: OnlineSpec | None = None  # features: online (None: stored)


def plan_training(
    root: Path,
    partitions: list[str],
    work: Path,
    backend: VerifierBackend,
    model_path: Path,
    settings: TrainingSettings,
    log,
    online: OnlineSpec | None = None,
) -> TrainingPlan:
    """Lay out the speculators training folder for ``partitions`` under ``work``, check its features were
    captured from this verifier, fill the settings the verifier decides, and pick the draft vocabulary.
    ``online``: the features come from an extraction server (stored files where they exist)."""
    try:
        made_online = online_manifest(backend, model_path, online) if online is not None else None
        data = build_training_data(root, partitions, work, log=log, online=made_online)
        if online is not None:
            check_scratch_cap(online.scratch_cap_bytes, data.longest_row, data.manifest)
    except TrainingDataError as err:
        raise CheckpointTrainingError(str(err)) from err
    manifest = data.manifest
    identity = backend.identity(model_path)
    if manifest.verifier_id != identity:
        raise CheckpointTrainingError(
            f"hidden_states of {partitions} were captured from verifier {manifest.verifier_path} (identity "
            f"{manifest.verifier_id}), but the verifier resource is {model_path} (identity {identity}): "
            "re-materialize hidden_states, or point verifier.model_path at the captured verifier"
        )
    text_config = backend.text_config(model_path)  # the decoder's: for the settings and the capacity plan
    settings, resolved = resolve_settings(settings, VerifierShape.of(text_config))
    for name, how in resolved.items():
        log.info(f"{name} unset: {how}")
    log.info(
        f"training data: {data.num_rows} rows ({data.num_tokens} tokens, {data.num_supervised_tokens} "
        f"supervised) from {partitions}; verifier {model_path}, aux layers {manifest.aux_layer_ids}"
    )
    vocab_size = backend.vocab_size(model_path)
    try:
        vocab = build_draft_vocab(data.path, settings.draft_vocab_size, vocab_size, log=log)
    except DraftVocabError as err:
        raise CheckpointTrainingError(str(err)) from err
    log.info(
        f"draft vocabulary: {vocab.size} of {vocab_size} tokens, covering {vocab.coverage:.1%} of supervised tokens"
    )
    if data.online:
        log.info(
            f"features online: {data.generated_rows} of {data.num_rows} rows from the extraction server each "
            f"epoch, the rest from stored hidden_states; scratch cap {online.scratch_cap_bytes} bytes"
        )
    return TrainingPlan(list(partitions), data, vocab, settings, resolved, text_config, online)


@dataclass(frozen=True)
class KeptCheckpoint:
    """The checkpoint folder a training kept, and what it records."""

    folder: Path
    digest: str  # checkpoint_id of the model files and training run (the folder's name: its first 16 characters)
    training: dict  # training.json
    lineage: dict  # lineage.json as collected (before the checkpoint's own files were added), or as kept before
    lineage_sha256: str  # sha256 of the lineage.json written
    summary: dict  # the trainer's metrics of the kept epoch


def training_record(
    plan: TrainingPlan,
    trained: trainer.TrainerResult,
    *,
    training_run: str,
    recipe: dict,
    code_version: str,
    backend_name: str,
    model_path: Path,
    dagster_run_id: str,
    online_features: dict | None = None,
) -> dict:
    """``training.json``: the recipe and settings, the data, vocabulary and verifier, and the metrics."""
    data, vocab, manifest = plan.data, plan.vocab, plan.data.manifest
    return {
        "training_run": training_run,
        "recipe": recipe,
        "settings": plan.settings.model_dump(),
        "resolved_from_verifier": plan.resolved_from_verifier,
        "code_version": code_version,
        "data": {
            "partitions": plan.partitions,
            "folder": str(data.path),
            "content_hash": data.content_hash,
            "rows": data.num_rows,
            "validation_rows": data.num_validation_rows,
            "tokens": data.num_tokens,
            "supervised_tokens": data.num_supervised_tokens,
            "skipped_without_hidden_states": data.skipped_without_hidden_states,
            "skipped_unsupervised": data.skipped_unsupervised,
            "upstream_versions": data.upstream_versions,
        },
        "vocab": {
            "size": vocab.size,
            "coverage": vocab.coverage,
            "distinct_supervised_tokens": vocab.distinct_supervised_tokens,
        },
        "verifier": {
            "path": str(model_path),
            "backend": backend_name,
            "identity": manifest.verifier_id,
            "layer_ids": manifest.layer_ids,
            "hidden_size": manifest.hidden_size,
        },
        "trainer": {"folder": str(trained.folder), "dagster_run_id": dagster_run_id},
        "metrics": trained.summary,
    } | ({"online_features": online_features} if online_features else {})


def train_and_keep(
    plan: TrainingPlan,
    backend: VerifierBackend,
    model_path: Path,
    work: Path,
    checkpoints: Path,
    lineage_of: Callable[[dict, Path], dict],
    log,
    *,
    training_run: str,
    recipe: dict,
    code_version: str,
    dagster_run_id: str,
    storage_root: Path | None = None,
) -> KeptCheckpoint:
    """Train (or resume, or reuse) the draft of ``plan`` under ``work``, then keep its best epoch under
    ``checkpoints`` with ``training.json`` (:func:`training_record`) and ``lineage.json``
    (``lineage_of(training, training_folder)``: the record
    :func:`~eagle_assets.lineage.record.write_lineage` completes with the checkpoint's own files, and signs
    when a lineage key is configured). ``storage_root``: where an online run's extraction server keeps its
    scratch folder."""
    key = lineage_key()  # read first: a key file that cannot be read fails now, not after the training
    # A nested (Kimi-K2.5) config is resolved into a plain decoder folder speculators can read.
    trained_against = training_verifier(backend, model_path, work)
    online = OnlineRun(storage_root, backend, plan.data, plan.online, log) if plan.online else None
    serve = online.serve if online is not None else None
    trained = trainer.train(plan.data, plan.vocab, str(trained_against), plan.settings, work, log, serve)
    training = training_record(
        plan,
        trained,
        training_run=training_run,
        recipe=recipe,
        code_version=code_version,
        backend_name=backend.name,
        model_path=model_path,
        dagster_run_id=dagster_run_id,
        online_features=online.record(plan.partitions) if online is not None else None,
    )

    def record(tmp: Path, model_hashes) -> tuple[dict, str]:
        # Collected only for a folder being written: it reads every upstream file's record and the instance.
        lineage = lineage_of(training, plan.data.path)
        return lineage, write_lineage(tmp, lineage, model_hashes, key)

    extra = {TRAINING_FILE: training}
    folder, digest, written = keep_checkpoint(trained.best_dir, checkpoints, training_run, extra, record)
    if written is None:  # this run kept these weights before: that folder's records stand
        training, lineage, lineage_sha256 = kept_records(folder)
        log.info(f"{folder} was kept by training run {training_run!r} before; its records stay as they are")
    else:
        lineage, lineage_sha256 = written
    return KeptCheckpoint(folder, digest, training, lineage, lineage_sha256, trained.summary)


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


def verifier_problems(checkpoint: Path, root: Path, backend: VerifierBackend, model_path: Path) -> list[str]:
    """Where ``checkpoint`` disagrees with the verifier and with the ``hidden_states`` manifests it was
    trained on (the partitions its ``training.json`` names)."""
    facts = verifier_facts(backend, model_path)
    training = json.loads((checkpoint / TRAINING_FILE).read_text())
    if (online := recorded_manifest(training)) is not None:  # no hidden_states manifest: what the server made
        return verifier_mismatches(checkpoint, facts, online)
    problems = []
    for partition in training["data"]["partitions"]:
        problems += verifier_mismatches(
            checkpoint, facts, FeatureManifest.read(asset_folder(root, HIDDEN_STATES, partition))
        )
    return problems
