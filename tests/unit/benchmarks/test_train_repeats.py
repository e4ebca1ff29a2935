"""train_gpu.py's repeats: a time budget stops the rotation at the first run that does not fit, so that the
next job, resumed from the runs file, goes on in the same order; a run's length is known from the runs file
or the warm-up before it is run in the job."""

from __future__ import annotations

import json
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


def test_a_first_run_is_bounded_by_the_runs_file_and_the_warm_up_not_taken_as_free(tmp_path):
    # A job that already spent 100 s of its 150 s budget (data, warm-up): a run known to take 80 s is not
    # started, whether the runs file or the warm-up says so; a variant nothing is known of still runs.
    runs_file = tmp_path / "runs.jsonl"
    runs_file.write_text(
        json.dumps(dict(setup={}, repeat=0, name="a", tokens_per_s=1.0, startup_s=1.0, line="a", seconds=80.0))
    )

    def job(names, warm_up_bounds):
        done = []

        class Timed(Repeats):
            def run_once(self, name, repeat, tally, record):
                done.append((repeat, name))
                return 1.0

        args = types.SimpleNamespace(repeats=2, once=[], time_budget_s=150.0, runs_file=runs_file)
        Timed(args, {}, tmp_path, [1], "fused", started=time.perf_counter() - 100).run(names, {}, warm_up_bounds)
        return done

    assert job(["a"], None) == []  # repeat 1 of a is in the file; repeat 2 would take ~80 s
    assert job(["b"], {"b": 80.0}) == []
    assert job(["b"], None) == [(0, "b"), (1, "b")]
