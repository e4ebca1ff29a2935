"""train_gpu.py's stamped log: epochs timed from a process's own lines, and ours' loader waits per epoch."""

from __future__ import annotations

from benchmarks.train_runs import StampedLog
from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import LoaderWait


def test_the_log_times_epochs_and_keeps_the_loader_waits_by_epoch_line_number(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    log = StampedLog("ours", quiet=True)
    # The loader lines as the training process writes them (its logger's name before them).
    first, second = LoaderWait(86, 0.41, 0.30), LoaderWait(86, 2.05, 0.62)
    for line in [
        "speculators: Training epoch 1/2 started",
        f"eagle_assets.eagle3_checkpoint: {first.line(0)}",
        "speculators: Training epoch 1/2 completed",
        "speculators: Training epoch 2/2 started",
        f"eagle_assets.eagle3_checkpoint: {second.line(1)}",
        "speculators: Training epoch 2/2 completed",
    ]:
        log.info(line)
    assert log.loader_waits == {1: 0.41, 2: 2.05}
    (seconds,) = log.epoch_durations(2)
    assert 0 <= seconds == log.span_seconds(2)
