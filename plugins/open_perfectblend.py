"""Built-in source ``open_perfectblend``: `mlabonne/open-perfectblend` through Hugging Face ``datasets``.

Rows are ShareGPT-shaped (``conversations`` of ``{from, value}``, plus a ``source`` column naming the
sub-dataset). ``location`` is a hub id (optionally ``id@revision``; default the public dataset) or a
local copy (a ``.jsonl``/``.json``/``.parquet`` file, folder or glob), for machines without hub access.
The dataset is streamed, so a 1.4M-row dataset never has to fit in memory or the datasets cache.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.plugins.local_files import files_version, resolve_files
from eagle_assets.sources import DatasetSource, RawRecord, SourceUnavailable

HUB_ID = "mlabonne/open-perfectblend"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass
class OpenPerfectblendSource(DatasetSource):
    """A ShareGPT-shaped dataset loaded with ``datasets.load_dataset(..., streaming=True)``."""

    def _location(self, location: str | None) -> str:
        return location or self.default_location or HUB_ID

    @staticmethod
    def _is_local(location: str) -> bool:
        expanded = os.path.expanduser(location)
        return Path(expanded).exists() or bool(glob.glob(expanded)) or expanded.startswith(("/", "."))

    def _local_files(self, location: str) -> list[Path]:
        return resolve_files(self.name, location, LOCAL_SUFFIXES)

    def resolved_version(self, location: str | None = None) -> str:
        loc = self._location(location)
        if self._is_local(loc):
            return files_version(self._local_files(loc))
        repo, _, revision = loc.partition("@")
        from huggingface_hub import HfApi

        try:
            return HfApi().dataset_info(repo, revision=revision or None).sha
        except Exception as exc:
            raise SourceUnavailable(
                f"source {self.name!r}: cannot resolve {loc!r} on the Hugging Face Hub ({type(exc).__name__}: "
                f"{exc}); without hub access, download the dataset and set `location` to the local file"
            ) from exc

    def records(self, location: str | None = None) -> Iterator[RawRecord]:
        from datasets import load_dataset

        loc = self._location(location)
        label = loc  # the hub id, or the local file/glob's own name (rows must not depend on the mount point)
        if self._is_local(loc):
            label = Path(loc).name
            files = self._local_files(loc)
            kinds = {"parquet" if f.suffix == ".parquet" else "json" for f in files}
            if len(kinds) > 1:
                raise SourceUnavailable(
                    f"source {self.name!r}: {loc!r} mixes Parquet and JSON files; point at one kind"
                )
            dataset = load_dataset(kinds.pop(), data_files=[str(f) for f in files], split="train", streaming=True)
        else:
            repo, _, revision = loc.partition("@")
            dataset = load_dataset(repo, revision=revision or None, split="train", streaming=True)
        for index, row in enumerate(dataset):
            extra = {k: v for k, v in row.items() if k != "conversations"}
            yield RawRecord(f"{label}#{index}", {"conversations": row.get("conversations"), "metadata": extra})


@hookimpl
def register_dataset_sources(register):
    register(
        OpenPerfectblendSource(
            name="open_perfectblend",
            description=f"{HUB_ID} (ShareGPT shape) via Hugging Face datasets; hub id or local copy",
            default_location=HUB_ID,
        )
    )
