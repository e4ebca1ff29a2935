"""Built-in sources ``jsonl`` and ``parquet``: chat rows from local files.

Rows may use the OpenAI ``messages`` shape or the ShareGPT ``conversations`` shape (see
``eagle_assets.sources``). ``location`` (the prompts run config) is a file, a folder (every matching
file below it, sorted) or a glob. The version recorded in lineage is a hash of the files' contents, so
it changes exactly when the data does.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from eagle_assets import hookimpl
from eagle_assets.core.files import combined_hash, file_sha256
from eagle_assets.sources import DatasetSource, RawRecord, SkippedRow, SourceUnavailable

PARQUET_BATCH_ROWS = 1024


def resolve_files(source: str, location: str | None, suffixes: tuple[str, ...]) -> list[Path]:
    """The files a location names, in a stable order; :class:`SourceUnavailable` when there are none."""
    kinds = " or ".join(f"*{s}" for s in suffixes)
    if not location:
        raise SourceUnavailable(
            f"source {source!r} has no location: set `location` in the prompts run config "
            f"(a {kinds} file, a folder holding them, or a glob)"
        )
    expanded = os.path.expanduser(location)
    path = Path(expanded)
    if any(ch in expanded for ch in "*?["):
        files = sorted(Path(p) for p in glob.glob(expanded, recursive=True) if Path(p).is_file())
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    elif path.is_file():
        files = [path]
    else:
        raise SourceUnavailable(
            f"source {source!r}: location {location!r} does not exist; "
            f"give an existing {kinds} file, a folder holding them, or a glob"
        )
    if not files:
        raise SourceUnavailable(f"source {source!r}: location {location!r} holds no {kinds} file")
    return files


def files_version(files: list[Path]) -> str:
    """A short content hash over the files, in order."""
    return combined_hash(file_sha256(f) for f in files)[:16]


@dataclass
class LocalFileSource(DatasetSource):
    """Shared file resolution and versioning; subclasses read one file."""

    suffixes: tuple[str, ...] = ()

    def files(self, location: str | None) -> list[Path]:
        return resolve_files(self.name, location or self.default_location, self.suffixes)

    def resolved_version(self, location: str | None = None) -> str:
        return files_version(self.files(location))

    def records(self, location: str | None = None) -> Iterator[RawRecord | SkippedRow]:
        files = self.files(location)
        self.check_files(files)
        # Rows are labelled relative to the files' common folder, so labels (kept in each prompt's
        # metadata, hence in the data version) do not depend on where the data is mounted.
        root = Path(os.path.commonpath([f.parent for f in files]))
        for path in files:
            yield from self.read_file(path, str(path.relative_to(root)))

    def check_files(self, files: list[Path]) -> None:
        """Fail before the first row when a file cannot be read at all."""

    def read_file(self, path: Path, label: str) -> Iterator[RawRecord | SkippedRow]:
        raise NotImplementedError


@dataclass
class JsonlSource(LocalFileSource):
    """One JSON object per line. Blank lines are ignored; a broken line is skipped with its reason."""

    suffixes: tuple[str, ...] = (".jsonl",)

    def read_file(self, path: Path, label: str) -> Iterator[RawRecord | SkippedRow]:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                row = f"{label}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield SkippedRow(
                        row,
                        f"bytes that are not UTF-8 ({exc.reason} at byte {exc.start}); re-encode the file as UTF-8",
                        "not_utf8",
                    )
                    continue
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield SkippedRow(row, f"not valid JSON ({exc.msg} at column {exc.colno})")
                    continue
                if not isinstance(data, dict):
                    yield SkippedRow(row, f"a line must be a JSON object, got {type(data).__name__}")
                    continue
                yield RawRecord(row, data)


@dataclass
class ParquetSource(LocalFileSource):
    """Parquet files with a ``messages`` or ``conversations`` column (list of structs)."""

    suffixes: tuple[str, ...] = (".parquet",)

    def check_files(self, files: list[Path]) -> None:
        for path in files:
            try:
                pq.ParquetFile(path).close()
            except Exception as exc:
                raise SourceUnavailable(
                    f"source {self.name!r}: {path} is not a readable Parquet file "
                    f"({type(exc).__name__}: {exc}); rewrite it with pyarrow/pandas `to_parquet`, "
                    "or use the `jsonl` source for JSON lines"
                ) from exc

    def read_file(self, path: Path, label: str) -> Iterator[RawRecord | SkippedRow]:
        index = 0
        with pq.ParquetFile(path) as pf:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                for data in batch.to_pylist():
                    yield RawRecord(f"{label}#{index}", data)
                    index += 1


@hookimpl
def register_dataset_sources(register):
    register(JsonlSource(name="jsonl", description="Local JSON-lines chat files (OpenAI or ShareGPT shape)"))
    register(ParquetSource(name="parquet", description="Local Parquet chat files (OpenAI or ShareGPT shape)"))
