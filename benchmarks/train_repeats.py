"""The rotating repeats of ``benchmarks/train_gpu.py``: every variant ``--repeats`` times, within
``--time-budget-s``, resumable from ``--runs-file``, each run's line printed and kept in a :class:`Tally`.

Needs the repository root on ``sys.path`` (the entry scripts put it there).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from benchmarks.train_runs import probe_run, timed_run
from benchmarks.train_summary import Tally
from benchmarks.train_variants import PROBE_VARIANTS
from eagle_assets.eagle3_checkpoint import trainer


def load_finished(runs_file: Path | None, setup_key: dict) -> dict[tuple[int, str], dict]:
    """Runs already recorded in ``--runs-file``, by (repeat, variant); a file of other settings is refused."""
    finished: dict[tuple[int, str], dict] = {}
    if runs_file and runs_file.exists():
        for record in map(json.loads, runs_file.read_text().splitlines()):
            if record["setup"] != setup_key:
                sys.exit(
                    f"--runs-file {runs_file} holds runs of other settings ({record['setup']}); "
                    f"this run's are {setup_key}: give a new file"
                )
            finished[(record["repeat"], record["name"])] = record
    return finished


class Repeats:
    """Runs ``commands`` (variant -> command line for a save folder) under ``args``' repeats, budget and runs file."""

    def __init__(
        self,
        args,
        commands: dict[str, Callable[[Path], list[str]]],
        work: Path,
        epoch_tokens: list[int],
        settings_loss: str,
        started: float,
    ):
        self.args = args
        self.commands = commands
        self.work = work
        self.timed_tokens = sum(epoch_tokens)
        self.settings_loss = settings_loss
        self.started = started
        self.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    def run(self, names: list[str], setup_key: dict, warm_up_bounds: dict[str, float] | None = None) -> Tally:
        """Every run not in the runs file, in rotating order, until the budget stops the rotation.
        ``warm_up_bounds`` (``train_warmup.first_run_bounds``) bounds a run not yet measured."""
        tally = Tally(names)
        finished = load_finished(self.args.runs_file, setup_key)
        run_seconds: dict[str, float] = {}
        # A variant's length as known before this job: its last run in the runs file, else its warm-up.
        known = dict(warm_up_bounds or {})
        known.update({name: record["seconds"] for (_, name), record in sorted(finished.items())})
        stopped = False
        for repeat in range(self.args.repeats):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                if repeat and name in self.args.once:
                    continue
                if (repeat, name) in finished:
                    tally.replay(finished[(repeat, name)])
                    continue
                # A variant's next run is estimated by its last one; a variant not run yet by what was known of
                # it before, else by the shortest run so far (the first run of a process compiles cold and is no
                # estimate of the warm ones after it).
                estimate = run_seconds.get(name, known.get(name, min(run_seconds.values(), default=0.0)))
                if self.args.time_budget_s and time.perf_counter() - self.started + estimate > self.args.time_budget_s:
                    stopped = True  # no later run either: a resumed job goes on in the same rotating order
                if stopped:
                    continue
                run_seconds[name] = self.run_once(name, repeat, tally, dict(setup=setup_key, repeat=repeat, name=name))
        return tally

    def run_once(self, name: str, repeat: int, tally: Tally, record: dict) -> float:
        """One run, printed, recorded and its folder removed; returns its seconds."""
        save = self.work / f"{name}-{repeat}"
        run_started = time.perf_counter()
        try:
            rate, startup, line = self.measure(name, repeat, save, run_started, tally, record)
            tally.rates[name].append(rate)
            tally.startups[name].append(startup)
            tally.lines.append(line)
            record.update(tokens_per_s=rate, startup_s=startup, line=line)
        except trainer.TrainingFailed as failure:
            line = f"run repeat={repeat + 1} {name}: FAILED: {str(failure)[-1500:]}"
            tally.failures.append(line)
            record.update(failed=True, line=line)
        print(line, flush=True)
        seconds = time.perf_counter() - run_started
        record.update(seconds=seconds)
        if self.args.runs_file:
            with self.args.runs_file.open("a") as runs_file:
                runs_file.write(json.dumps(record) + "\n")
        shutil.rmtree(save, ignore_errors=True)  # checkpoints of an 8B-shaped draft are GBs
        if self.out:
            (self.out / "train_gpu_runs.txt").write_text("\n".join(tally.lines + tally.failures) + "\n")
        return seconds

    def measure(self, name: str, repeat: int, save: Path, run_started: float, tally: Tally, record: dict):
        """(tokens/s, start-up seconds, printed line) of one run; the span rate goes to ``tally`` and ``record``."""
        epochs = self.args.epochs
        if name in PROBE_VARIANTS:
            rate, startup, probe_log = probe_run(name, self.commands[name](save), save, self.settings_loss)
            line = (
                f"run repeat={repeat + 1} {name}: whole run {time.perf_counter() - run_started:.0f}s, "
                f"startup {startup:.1f}s, resident-step rates {probe_log.rates}, {rate:.0f} tok/s"
            )
            if probe_log.loader_rates:
                line += f", loader path alone {' '.join(f'{r:.0f}' for r in probe_log.loader_rates)} tok/s"
            if probe_log.real_rates:
                real = probe_log.real_rates
                line += (
                    f", steps on the real loader path {' '.join(f'{r:.0f}' for r in real)} tok/s "
                    f"(real_vs_resident={median(real) / rate:.3f})"
                )
            return rate, startup, line
        log = timed_run(name, self.commands[name](save), save, epochs)
        rate, startup = self.timed_tokens / sum(log.epoch_durations(epochs)), log.startup_seconds()
        span_rate = self.timed_tokens / log.span_seconds(epochs)
        tally.span_rates[name].append(span_rate)
        record.update(span_tokens_per_s=span_rate)
        line = (
            f"run repeat={repeat + 1} {name}: whole run {time.perf_counter() - run_started:.0f}s, "
            f"startup {startup:.1f}s, epoch 1 (compile) "
            f"{log.marks[(1, 'completed')] - log.marks[(1, 'started')]:.1f}s, timed epochs "
            f"{' '.join(f'{s:.2f}s' for s in log.epoch_durations(epochs))}, {rate:.0f} tok/s "
            f"(span {log.span_seconds(epochs):.2f}s: {span_rate:.0f} tok/s)"
        )
        if log.loader_waits:  # ours only: the training thread's waits on its loader in the timed epochs
            waits = [log.loader_waits.get(k) for k in range(2, epochs + 1)]
            line += f", loader waits {' '.join('-' if w is None else f'{w:.2f}s' for w in waits)}"
        return rate, startup, line
