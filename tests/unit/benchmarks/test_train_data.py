"""train_gpu.py's data: a job resumed on the same machine keeps the features an earlier job wrote with the same
settings, and rewrites them for other settings."""

from __future__ import annotations

import types

from benchmarks.draft_shapes import layer_ids, resolved_sizes, verifier_config
from benchmarks.train_data import write_data


def test_features_written_once_per_settings(tmp_path):
    config = verifier_config("tiny-kimi")
    draft_vocab = min(resolved_sizes("tiny-kimi")[0], config.vocab_size)
    args = types.SimpleNamespace(
        work=tmp_path, shape="tiny-kimi", rows=6, distinct_rows=3, seq_len=(64, 96), fp8_features=False
    )

    def features_written() -> dict:
        data = write_data(args, config, layer_ids("tiny-kimi"), draft_vocab, "cpu")[0]
        assert data.num_rows == args.rows
        return {p: p.stat().st_mtime_ns for p in (tmp_path / "storage").rglob("*") if p.is_file()}

    first = features_written()
    assert first
    assert features_written() == first
    args.rows = 8
    again = features_written()
    assert again and not again.items() & first.items()  # every file written anew
