"""`make demo`, then `make demo VERIFIER=tiny-kimi`, then `make demo` again, in one DAGSTER_HOME and storage
root (tests/conftest.py runs them in that order): each draft is trained on its own verifier's samples, the
way back reuses everything stored (its evaluation included), and both kept checkpoints still verify after the
later materializations."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from eagle_assets.core.layout import REASONING_SAMPLES, TOKEN_SEQUENCES
from eagle_assets.lineage.record import read_lineage


def _checkpoint(output: str) -> Path:
    return Path(re.findall(r"^checkpoint=(.+)$", output, flags=re.MULTILINE)[-1])


def _paths(lineage: dict, asset: str) -> set[str]:
    return {a["path"] for a in lineage["artifacts"] if a["asset"] == asset}


def test_each_verifier_trains_on_its_own_samples_and_both_checkpoints_verify(demo, kimi_demo, back_demo):
    assert demo.root == kimi_demo.root == back_demo.root and demo.home == kimi_demo.home == back_demo.home
    qwen3, kimi = read_lineage(_checkpoint(demo.output)), read_lineage(_checkpoint(kimi_demo.output))
    for asset in (REASONING_SAMPLES, TOKEN_SEQUENCES):
        assert _paths(qwen3, asset) and _paths(kimi, asset), asset
        assert not _paths(qwen3, asset) & _paths(kimi, asset), f"{asset}: the two drafts share files"

    # Back on tiny-qwen3: nothing captured again, the same training data, hence the same kept checkpoint.
    log = Path(re.match(r"full log: (.+)$", back_demo.output.splitlines()[0]).group(1)).read_text()
    assert re.search(r"demo: \d+ prompts in splits .*, 0 to capture", log), log[-3000:]
    assert _checkpoint(back_demo.output) == _checkpoint(demo.output)
    assert "was kept by training run 'demo' before; its records stay as they are" in log  # nothing rewritten
    # The same checkpoint, prompts, settings, server and vLLM: the evaluation is the one stored, not re-measured.
    assert "that measurement is reused" in log, log[-3000:]

    script = Path(sys.executable).with_name("eagle-assets")
    for checkpoint in (_checkpoint(demo.output), _checkpoint(kimi_demo.output)):
        verify = subprocess.run(
            [str(script), "lineage", "verify", str(checkpoint)], env=demo.env, capture_output=True, text=True
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
