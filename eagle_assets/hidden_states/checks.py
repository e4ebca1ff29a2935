"""The ``files_match_rows`` check of ``hidden_states``: what a sample of indexed files still holds, and its verdict."""

from __future__ import annotations

import json
import random
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq

from eagle_assets.core.checks import check_result
from eagle_assets.core.files import file_sha256
from eagle_assets.core.layout import FP8, INDEX_FILE, MANIFEST_FILE, current_folder
from eagle_assets.core.tables import list_rows
from eagle_assets.hidden_states.files import INDEX_SCHEMA, SCALES_KEY, load_sample

CHECK_SAMPLE = 16


def sampled_file_problems(folder: Path, sequences_file: Path, sample: int = CHECK_SAMPLE) -> tuple[int, list[str]]:
    """(files checked, problems): a seeded random sample of the files the partition ``folder``'s current
    index lists, each compared with its recorded sha256, the token ids of its ``token_sequences`` row (what
    speculators compares before training) and the manifest's storage dtype."""
    version = current_folder(folder)
    index = pq.read_table(version / INDEX_FILE, columns=INDEX_SCHEMA.names).to_pylist()
    dtype = json.loads((version / MANIFEST_FILE).read_text())["dtype"]
    rows = pq.read_table(sequences_file, columns=["prompt_id", "turn", "input_ids"])
    tokens = dict(zip(zip(rows["prompt_id"].to_pylist(), rows["turn"].to_pylist()), list_rows(rows["input_ids"])))
    problems, checked = [], min(sample, len(index))
    for entry in random.Random(0).sample(index, checked):
        path = folder / entry["file"]
        if not path.exists():
            problems.append(f"{entry['file']} ({entry['prompt_id']}) is missing")
        elif file_sha256(path) != entry["sha256"]:
            problems.append(f"{entry['file']} ({entry['prompt_id']}) changed since it was indexed")
        elif (stored := load_sample(path))["token_ids"].tolist() != tokens.get(
            (entry["prompt_id"], entry["turn"]), np.zeros(0)
        ).tolist():
            problems.append(f"{entry['file']} holds other tokens than row {entry['prompt_id']} of token_sequences")
        elif (SCALES_KEY in stored) != (dtype == FP8):
            problems.append(f"{entry['file']} is not stored as {dtype}, the dtype manifest.json records")
    return checked, problems


def files_match_rows_result(checked: int, problems: list[str]) -> dg.AssetCheckResult:
    """`files_match_rows`: the problems :func:`sampled_file_problems` found among ``checked`` files."""
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
