"""train_gpu.py's stamped log: epochs timed from a process's own lines, and ours' loader waits per epoch."""

from __future__ import annotations

from benchmarks.train_runs import StampedLog


def test_the_log_times_epochs_and_keeps_the_loader_waits_by_epoch_line_number(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    log = StampedLog("ours", quiet=True)
    for line in [
        "speculators: Training epoch 1/2 started",
        "eagle_assets.eagle3_checkpoint: epoch 0 loader: 86 batches, 0.41s waiting for them (0.30s for the first)",
        "speculators: Training epoch 1/2 completed",
        "speculators: Training epoch 2/2 started",
        "eagle_assets.eagle3_checkpoint: epoch 1 loader: 86 batches, 2.05s waiting for them (0.62s for the first)",
        "speculators: Training epoch 2/2 completed",
    ]:
        log.info(line)
    assert log.loader_waits == {1: 0.41, 2: 2.05}
    (seconds,) = log.epoch_durations(2)
    assert 0 <= seconds == log.span_seconds(2)
