"""How fast the prompts stage reads a dataset, against the floor of just parsing the JSON.

    python benchmarks/prompts_throughput.py [--rows 50000]

Prints rows/s for a bare ``json.loads`` loop (baseline) and for ``collect`` (read, validate,
normalize, id, split, dedup) on the same synthetic ShareGPT-shaped JSONL file, side by side, and
their ratio. At open-perfectblend's 1.4M rows the second number tells how long `prompts` takes.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer

from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.collection import collect


def write_rows(path: Path, rows: int) -> None:
    with open(path, "w") as fh:
        for i in range(rows):
            turns = [
                {"from": "human", "value": f"Question {i}: " + "tell me about it. " * 8},
                {"from": "gpt", "value": "An answer of moderate length. " * 10},
            ]
            fh.write(json.dumps({"conversations": turns}) + "\n")


def main(rows: int = typer.Option(50_000, help="Synthetic rows to read.")) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        write_rows(path, rows)
        start = time.perf_counter()
        with open(path, "rb") as fh:
            parsed = sum(1 for line in fh if json.loads(line))
        baseline = time.perf_counter() - start
        start = time.perf_counter()
        found = collect(dataset_source("jsonl"), str(path))
        measured = time.perf_counter() - start
    assert parsed == found.rows_read == len(found.prompts) == rows
    print(f"json.loads only : {rows / baseline:10.0f} rows/s")
    print(f"prompts collect : {rows / measured:10.0f} rows/s  ({measured / baseline:.1f}x the bare parse)")


if __name__ == "__main__":
    typer.run(main)
