"""A stored version's Dagster materialization: the latest one of an asset partition, or the one that
published a given version folder, as the plain values a lineage record keeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from eagle_assets.lineage.record import DATA_VERSION_TAG, jsonable


def _as_record(record: dg.EventLogRecord) -> dict:
    entry = record.event_log_entry
    mat = entry.asset_materialization
    tags = dict(mat.tags or {})
    provenance = dg.DataProvenance.from_tags(tags)
    return {
        "run_id": entry.run_id,
        "timestamp": entry.timestamp,
        "storage_id": record.storage_id,
        "data_version": tags.get(DATA_VERSION_TAG),
        "code_version": provenance.code_version if provenance else None,
        "input_data_versions": {
            key.to_user_string(): version.value
            for key, version in (provenance.input_data_versions.items() if provenance else ())
        },
        "metadata": {key: jsonable(value) for key, value in (mat.metadata or {}).items()},
    }


def _records_filter(asset: str, partition: str | None) -> dg.AssetRecordsFilter:
    return dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None)


def latest_materialization(instance: dg.DagsterInstance, asset: str, partition: str | None) -> dict | None:
    """Provenance and metadata of the latest materialization of ``asset`` (one partition), or None."""
    records = instance.fetch_materializations(_records_filter(asset, partition), limit=1).records
    return _as_record(records[0]) if records else None


def newest_first(instance: dg.DagsterInstance, asset: str, partition: str | None = None) -> Iterator[dg.EventLogRecord]:
    """Every materialization record of ``asset`` (one partition, or all), newest first, fetched a page at a time."""
    cursor = None
    while True:
        found = instance.fetch_materializations(_records_filter(asset, partition), limit=100, cursor=cursor)
        yield from found.records
        if not found.has_more:
            return
        cursor = found.cursor


def publishing_materialization(instance: dg.DagsterInstance, asset: str, partition: str, folder: Path) -> dict | None:
    """The latest materialization of ``asset[partition]`` whose ``path`` metadata lies in ``folder`` (a version
    or recipe folder): the one that published it, also once newer versions have replaced it; None if none did."""
    folder = folder.resolve()
    for record in newest_first(instance, asset, partition):
        path = jsonable((record.event_log_entry.asset_materialization.metadata or {}).get("path"))
        if path and Path(path).resolve().is_relative_to(folder):
            return _as_record(record)
    return None
