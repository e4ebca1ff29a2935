"""The demo's terminal: status lines redrawn in place, result lines kept, everything else in the log file."""

import io
import subprocess
import sys

import dagster as dg

from eagle_assets.demo.command import run_demo
from eagle_assets.demo.display import LINE_WIDTH, StageDisplay
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts_family


def test_status_line_shows_the_count_as_a_bar_and_skips_forwarded_server_lines():
    terminal = io.StringIO()
    display = StageDisplay(terminal, redraw=True, per_s=1e9)
    display.progress("reasoning_samples", "reasoning_samples: 357/713 done (50.1%), 3.1 req/s, eta 115s")
    display.progress("reasoning_samples", "[vllm] INFO 12-03 route /v1/completions")
    shown = terminal.getvalue()
    assert "[##########..........] reasoning_samples: 357/713 done" in shown
    assert "[vllm]" not in shown
    display.line("reasoning_samples[demo] version abc: rows=713")
    # The status line is blanked (spaces, back to column 0), then the result line stays on its own line.
    blanked, kept = terminal.getvalue()[len(shown) :].rsplit("\r", 1)
    assert blanked.strip() == "" and len(blanked) > 40
    assert kept == "reasoning_samples[demo] version abc: rows=713\n"


def test_without_a_tty_only_result_lines_are_printed():
    terminal = io.StringIO()
    display = StageDisplay(terminal, redraw=False)
    display.progress("prompts", "prompts: 10/20")
    display.line("prompts[demo] version x: rows_kept=713")
    assert terminal.getvalue() == "prompts[demo] version x: rows_kept=713\n"


def test_a_stage_run_again_counts_its_seconds_from_its_own_first_status():
    clock = iter([100.0, 101.0, 400.0, 403.0])
    terminal = io.StringIO()
    display = StageDisplay(terminal, redraw=False, clock=lambda: next(clock))
    display.progress("prompts", "prompts: 10/20")  # the dataset run's prompts
    display.result("prompts", "[demo] x: rows_kept=713")
    display.progress("prompts", "prompts: 1/48")  # the evaluation-only partition's, minutes later
    display.result("prompts", "[demo_ood] y: rows_kept=48")
    first, second = terminal.getvalue().splitlines()
    assert first.split()[1] == "1s" and second.split()[1] == "3s", terminal.getvalue()


def test_output_goes_to_the_log_file_children_included_and_the_terminal_gets_only_what_is_said(tmp_path):
    log = tmp_path / "logs" / "demo.log"
    script = (
        "import os, sys, pathlib\n"
        "from eagle_assets.demo.display import output_to_file\n"
        "with output_to_file(pathlib.Path(sys.argv[1])) as terminal:\n"
        "    print('python print')\n"
        "    sys.stderr.write('a warning\\n')\n"
        "    os.system('echo a child process line')\n"
        "    terminal.write('said to the terminal\\n')\n"
        "print('after the demo')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, check=True)
    assert done.stdout == "said to the terminal\nafter the demo\n"
    assert done.stderr == ""
    assert log.read_text().splitlines() == ["python print", "a warning", "a child process line"]


def test_the_demo_feeds_each_stage_to_the_display(storage_root, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: lines are cut at LINE_WIDTH all the same
    [prompts] = prompts_family.build(source_partitions())["assets"]
    defs = dg.Definitions(assets=[prompts], resources={"storage": storage_root})
    terminal = io.StringIO()
    display = StageDisplay(terminal, redraw=True, per_s=1e9)
    with dg.DagsterInstance.ephemeral() as instance:
        results = run_demo(defs, instance, "demo", display=display)
    assert all(r.success for r in results)
    # Both prompts runs (the demo partition, then the out-of-distribution set) drew prompts' status line.
    assert set(display.started) == {"prompts"}
    # Each materialization printed its result line as it happened: the demo partition, then demo_ood.
    results = [line.strip() for line in terminal.getvalue().split("\r") if " done: [" in line]
    assert [line.split(" done: ")[1].split(" ")[0] for line in results] == ["[demo]", "[demo_ood]"]
    assert all(line.startswith("prompts ") and "rows_kept=" in line for line in results)
    # The headline numbers only, within the terminal's line width; every number stays in the log and the UI.
    assert all(len(line) <= LINE_WIDTH and "rows_read=" not in line for line in results)
