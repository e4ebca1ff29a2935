"""The demo's closing lines of an evaluation: τ of each set it ran and τ in the first and last output-position
bins, in at most 4 lines that fit the terminal, still saying what the demo's end-to-end checks read."""

from __future__ import annotations

import re

from eagle_assets.demo.display import LINE_WIDTH
from eagle_assets.demo.outcome import evaluation_lines, fitted

HELD, OOD = "heldout[demo]", "ood[demo_ood]"


def metadata(**extra) -> dict:
    """An eagle3_eval's metadata as the demo's evaluation writes it (K=3, two sampling variants)."""
    meta = {
        "num_speculative_tokens": 3,
        "eval_set": HELD,
        "ood_eval_set": OOD,
        f"{HELD}/acceptance_length": 3.5821,
        f"{HELD}/prompts_evaluated": 64,
        f"{HELD}/simulated_acceptance_length": 3.5702,
        f"{HELD}/variant[instant]/acceptance_length": 3.4012,
        f"{HELD}/variant[instant]/prompts_evaluated": 13,
        f"{HELD}/variant[thinking]/acceptance_length": 3.6123,
        f"{HELD}/variant[thinking]/prompts_evaluated": 51,
        f"{HELD}/tau_ci_low": 3.41,
        f"{HELD}/tau_ci_high": 3.72,
        f"{HELD}/tau_tokens_0_512": 3.6101,
        f"{HELD}/steps_tokens_0_512": 4000,
        f"{HELD}/tau_tokens_512_1k": 3.4012,
        f"{HELD}/steps_tokens_512_1k": 120,
        f"{OOD}/acceptance_length": 2.9533,
        f"{OOD}/prompts_evaluated": 48,
        f"{OOD}/tau_tokens_0_512": 2.95,
        f"{OOD}/steps_tokens_0_512": 900,
        **{f"{label}/acceptance_pos_{i}": 0.9 - i / 10 for label in (HELD, OOD) for i in (1, 2, 3)},
    }
    return {**meta, **extra}


def test_the_evaluation_is_four_lines_that_fit_the_terminal_and_say_what_the_checks_read():
    lines = evaluation_lines(metadata())
    assert len(lines) == 4 and all(len(line) <= LINE_WIDTH for line in lines), lines
    output = "\n".join(lines)
    assert lines[0] == "acceptance_length=3.582" and lines[2] == "ood_acceptance_length=2.953"
    # What tests/e2e/test_demo.py reads.
    assert re.findall(r"^acceptance_length=.*\n.*simulated (\d+\.\d+)", output, flags=re.MULTILINE) == ["3.570"]
    assert re.search(r"out-of-distribution: ood\[demo_ood\], \d+ prompts", output)
    assert re.search(r"per sampling variant: instant τ \d\.\d+ \(\d+ prompts\), thinking τ \d\.\d+", output)
    # τ in the first and the last output-position bin of each set.
    assert lines[3].endswith("; held out 0-512 τ 3.610 → 512-1K τ 3.401; ood 0-512 τ 2.950)")


def test_without_an_ood_set_or_per_request_numbers_fewer_lines_say_what_there_is():
    meta = {k: v for k, v in metadata().items() if not k.startswith(OOD)}
    lines = evaluation_lines(meta)
    assert len(lines) == 3 and lines[2] == "  (along the output: held out 0-512 τ 3.610 → 512-1K τ 3.401)"
    bare = {k: v for k, v in meta.items() if "tau_" not in k and "steps_" not in k and "variant" not in k}
    lines = evaluation_lines(bare)
    assert lines == ["acceptance_length=3.582", f"  (held out: {HELD}, 64 prompts; simulated 3.570; K=3, per position "
                     "0.80 / 0.70 / 0.60)"]  # fmt: skip


def test_parts_that_do_not_fit_are_left_for_the_log_and_the_ui():
    assert fitted("  (head", ["a" * 50, None, "b" * 80, "c"], width=70) == f"  (head; {'a' * 50}; c)"


def test_long_labels_never_crowd_out_the_first_and_last_bins():
    """A long set label and wide numbers (K=9, τ above 10, large sets): the bins of both sets are still printed."""
    long_ood = "ood[" + "+".join(f"eval_set_{i}" for i in range(12)) + "]"
    meta = {k.replace(OOD, long_ood): v for k, v in metadata().items() if "tokens_512_1k" not in k and "pos_" not in k}
    meta |= {
        "num_speculative_tokens": 9,
        "ood_eval_set": long_ood,
        f"{HELD}/prompts_evaluated": 12345,
        f"{long_ood}/prompts_evaluated": 23456,
        f"{long_ood}/tau_ci_low": 2.81,
        f"{long_ood}/tau_ci_high": 3.02,
        f"{HELD}/tau_tokens_0_512": 10.0,
        f"{HELD}/tau_tokens_4k_8k": 10.25,
        f"{HELD}/steps_tokens_4k_8k": 7,
        f"{long_ood}/tau_tokens_0_512": 10.5,
        f"{long_ood}/tau_tokens_8k_up": 10.75,
        f"{long_ood}/steps_tokens_8k_up": 3,
        **{f"{HELD}/acceptance_pos_{i}": 1 - i / 10 for i in range(1, 10)},
    }
    lines = evaluation_lines(meta)
    assert len(lines) == 4 and all(len(line) <= LINE_WIDTH for line in lines), lines
    assert lines[3] == (
        "  (out-of-distribution, 23456 prompts; held out 0-512 τ 10.000 → 4K-8K τ 10.250; "
        "ood 0-512 τ 10.500 → 8K+ τ 10.750)"
    )
