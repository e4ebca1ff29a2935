"""train_gpu.py's repeats: a time budget stops the rotation at the first run that does not fit, so that the
next job, resumed from the runs file, goes on in the same order."""

from __future__ import annotations

import time
import types

from benchmarks.train_repeats import Repeats


def test_the_budget_stops_the_rotation_instead_of_running_later_runs_out_of_order(tmp_path):
    seconds = {"a": 10.0, "b": 50.0}
    done = []

    class Timed(Repeats):
        def run_once(self, name, repeat, tally, record):
            done.append((repeat, name))
            self.started -= seconds[name]  # the run's length passes on the job's clock
            return seconds[name]

    args = types.SimpleNamespace(repeats=3, once=[], time_budget_s=75.0, runs_file=None)
    Timed(args, {}, tmp_path, [1], "fused", started=time.perf_counter()).run(["a", "b"], {})
    # Repeat 2 starts with b (50 s would end at 110 s); a, which would fit, is not run before it.
    assert done == [(0, "a"), (0, "b")]
