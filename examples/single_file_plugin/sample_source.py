"""A dataset plugin in one file: question/answer pairs from a CSV file.

Use it without packaging anything:

    EAGLE_ASSETS_PLUGINS=examples/single_file_plugin/sample_source.py eagle-assets plugins

``csv_qa`` then appears as a dataset source and as a partition of ``prompts``; materialize it with
``location`` set to a CSV file with ``question`` and ``answer`` columns (``sample.csv`` beside this
file is the default).
"""

from __future__ import annotations

import csv
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.core.files import file_sha256
from eagle_assets.sources import DatasetSource, RawRecord, SkippedRow, SourceUnavailable

SAMPLE = Path(__file__).with_name("sample.csv")


class CsvQuestionAnswers(DatasetSource):
    """One prompt per CSV row: the ``question`` is the user turn, the ``answer`` the original answer."""

    def _path(self, location: str | None) -> Path:
        path = Path(location or self.default_location)
        if not path.is_file():
            raise SourceUnavailable(f"source {self.name!r}: {path} does not exist; set `location` to a CSV file")
        return path

    def resolved_version(self, location=None) -> str:
        return file_sha256(self._path(location))[:16]

    def records(self, location=None):
        path = self._path(location)
        with open(path, newline="", encoding="utf-8") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):  # line 1 is the header
                where = f"{path.name}:{line}"
                if not row.get("question"):
                    yield SkippedRow(where, "no `question` column value")
                    continue
                messages = [{"role": "user", "content": row["question"]}]
                if row.get("answer"):
                    messages.append({"role": "assistant", "content": row["answer"]})
                yield RawRecord(where, {"messages": messages, "metadata": {"topic": row.get("topic", "")}})


@hookimpl
def register_dataset_sources(register):
    register(
        CsvQuestionAnswers(
            name="csv_qa", description="Question/answer pairs from a CSV file", default_location=str(SAMPLE)
        )
    )
