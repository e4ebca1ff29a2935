"""A kept checkpoint by name, and what its training.json records (core.layout: eagle3_eval and the generation
server's draft both find and read checkpoints through it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_assets.core.files import write_json
from eagle_assets.core.layout import TRAINING_FILE, named_checkpoint, read_training_record


def test_a_kept_checkpoint_is_named_by_its_folder_or_by_a_path(tmp_path):
    kept = tmp_path / "eagle3_checkpoint"
    assert named_checkpoint("0123abcd", kept) == kept / "0123abcd"
    assert named_checkpoint("0123abcd", str(kept)) == kept / "0123abcd"
    assert named_checkpoint("/elsewhere/0123abcd", kept) == Path("/elsewhere/0123abcd")
    assert named_checkpoint("runs/0123abcd", kept) == Path("runs/0123abcd")  # a relative path, not a folder name


def test_the_training_record_is_read_or_empty_without_one(tmp_path):
    assert read_training_record(tmp_path) == {}
    write_json({"training_run": "v1", "data": {"partitions": ["demo"]}}, tmp_path / TRAINING_FILE)
    assert read_training_record(str(tmp_path)) == {"training_run": "v1", "data": {"partitions": ["demo"]}}
    (tmp_path / TRAINING_FILE).write_text("{not json")
    with pytest.raises(ValueError):  # a broken record is an error, never read as "no record"
        read_training_record(tmp_path)
