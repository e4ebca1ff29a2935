"""Showing a lineage record: the checkpoint materialization's metadata (a Markdown table the Dagster UI
shows) and the plain-text chain ``eagle-assets lineage show`` prints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, PER_DATASET_STAGES, published_kind


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
        *(f"**newer since training:** {changed_line(c)}" for c in lineage.get("changed_while_training", [])),
    ]
    return "\n".join(rows).rstrip()


def _one(values: list | None) -> Any:
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def changed_line(changed: dict) -> str:
    """One upstream asset partition re-materialized while the checkpoint trained (``changed_while_training``)."""
    head = f"{changed['asset']}[{changed['partition']}] was re-materialized while the checkpoint trained: "
    if not changed["trained_on_stored"]:
        return (
            head + f"version {changed['trained_on']}, the one it trained on, is no longer stored, so this record "
            f"lists none of its files (version {changed['current']} is current)"
        )
    return (
        head
        + f"this record lists version {changed['trained_on']}, the one it trained on ({changed['current']} is current)"
    )


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
            f"  -> hidden_states[{p}]: backend {hs.get('backend') or verifier.get('backend')}, "
            f"layers {hs.get('layer_ids')}, dtype {hs.get('dtype')}, {shards} tensor files; {prov('hidden_states', p)}"
        )
        versions = {asset: by_partition.get(p) for asset, by_partition in lineage.get("versions", {}).items()}
        stored = [f"{a} {published_kind(a)}/{versions[a]}" for a in PER_DATASET_STAGES if versions.get(a)]
        if stored:
            lines.append(f"     files of {p}: {', '.join(stored)}")
    stale = [link for link in lineage.get("links", []) if not link["consistent"]]
    for link in stale:
        lines.append(
            f"  ! {link['asset']}[{link['partition']}] consumed {link['input']} {link['consumed'][:16]}, "
            f"but the files on disk are version {link['on_disk']}: re-materialized since"
        )
    lines += [f"  ! {changed_line(c)}" for c in lineage.get("changed_while_training", [])]
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
