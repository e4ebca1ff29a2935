"""``eagle-assets demo`` end to end, exactly as ``make demo`` runs it: the whole graph on each embedded
verifier (tiny Qwen3 and tiny-kimi; demo prompts, a real vLLM server, real speculators training,
vLLM-measured acceptance), in a fresh DAGSTER_HOME and storage root (tests/e2e/conftest.py runs each
demo once; tiny-qwen3's follows a demo killed mid-run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from eagle_assets.demo.command import DEMO_LOGS


def _value(output: str, key: str) -> str:
    found = re.findall(rf"^{key}=(.+)$", output, flags=re.MULTILINE)
    assert found, f"no `{key}=` line in the demo output:\n{output[-3000:]}"
    return found[-1]


def test_demo_ends_with_a_servable_checkpoint_and_its_acceptance(any_demo):
    from eagle_assets.demo.command import demo_ops
    from eagle_assets.tiny_verifier.embedded import embedded_verifier

    output, verifier = any_demo.output, any_demo.verifier
    checkpoint = Path(_value(output, "checkpoint"))
    assert {"config.json", "model.safetensors", "lineage.json"} <= {p.name for p in checkpoint.iterdir()}
    tau = float(_value(output, "acceptance_length"))
    # vLLM-measured at K=3 on in-distribution held-out prompts, at least the demo's floor for this verifier
    # (tiny-qwen3 3.5, tiny-kimi 2.5).
    assert tau >= demo_ops(verifier)["eagle3_eval"]["config"]["min_acceptance_length"]
    # The same draft simulated offline on the same greedy outputs (the verifier's hidden states, speculators'
    # forward) agrees with vLLM: measured 3.664 vs 3.652, 3.729 vs 3.717, 1.361 vs 1.384. A server running
    # another draft, or features taken at the wrong layers, would not.
    simulated = float(re.findall(r"^acceptance_length=.*\n.*simulated (\d+\.\d+)", output, flags=re.MULTILINE)[-1])
    assert abs(tau - simulated) <= 0.25, (tau, simulated)
    # The out-of-distribution set (demo_ood), measured the same way beside it (measured 2.943 tiny-qwen3, 2.086
    # tiny-kimi). The draft still predicts some of the verifier's words there (1.0 = nothing accepted), and not
    # better than on prompts like its training data: an OOD set no harder than the held-out one isn't one.
    ood = float(_value(output, "ood_acceptance_length"))
    assert 1.5 <= ood <= tau + 0.1, (ood, tau)
    assert re.search(r"out-of-distribution: ood\[demo_ood\], \d+ prompts", output)
    # The captured samples' quality classes, as shares.
    assert re.search(r"^sample quality \(demo\): [a-z_]+ \d+\.\d%", output, flags=re.MULTILINE), output[-3000:]
    # τ per sampling variant: the demo asks a fifth of its prompts in instant mode.
    assert re.search(r"per sampling variant: instant τ \d\.\d+ \(\d+ prompts\), thinking τ \d\.\d+", output), output[
        -3000:
    ]
    tail = output[output.index("acceptance_length=") :]
    assert "lineage:" in tail and "prompts[demo]" in tail
    # The evaluation in at most 4 lines, τ of the first output-position bin among them.
    assert len(tail[: tail.index("lineage:")].splitlines()) <= 4, tail
    assert re.search(r"held out 0-512 τ \d\.\d{3}", output), tail
    # The hidden states came from this verifier's backend (tiny-kimi: `kimi`, vLLM's extract_hidden_states).
    assert f"hidden_states[demo]: backend {embedded_verifier(verifier).backend}," in tail


def test_demo_checkpoint_lineage_verifies(any_demo):
    output, env = any_demo.output, any_demo.env
    checkpoint = _value(output, "checkpoint")
    script = Path(sys.executable).with_name("eagle-assets")
    verify = subprocess.run([str(script), "lineage", "verify", checkpoint], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_demo_terminal_output_is_short_and_the_log_file_holds_the_rest(any_demo):
    output, env = any_demo.output, any_demo.env
    lines = output.splitlines()
    # A status line per stage (redrawn in place on a TTY; absent here, no TTY), a result line per asset, the summary.
    assert len(lines) <= 40, "\n".join(lines)
    assert "[vllm]" not in output and "STEP_SUCCESS" not in output
    log = Path(re.match(r"full log: (.+)$", lines[0]).group(1))
    # Beside Dagster's telemetry "logs" folder, which any `dagster dev` on this home empties (the tiny-kimi
    # demo's tests run after the UI tests that start one there).
    assert log.parent == Path(env["DAGSTER_HOME"]).resolve() / DEMO_LOGS
    text = log.read_text()
    # Every INFO line of every stage (vLLM's forwarded lines among them) and the result.
    assert "[vllm]" in text and "reasoning_samples" in text and "acceptance_length=" in text
