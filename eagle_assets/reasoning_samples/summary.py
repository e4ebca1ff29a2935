"""Counts over a partition's samples table, as the ``reasoning_samples`` asset reports them (its metadata keys),
and the examples it shows; plain values only (numbers, text), the asset wraps them for Dagster."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle_assets.reasoning_samples.capture import CaptureReport
from eagle_assets.reasoning_samples.quality import QUALITY_CLASSES, count_classes
from eagle_assets.reasoning_samples.variants import SamplingVariant

PERCENTILES = (50, 90, 99)
EXAMPLES_PER_CLASS = 3
ERROR_EXAMPLES = 10


def percentiles(name: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {f"{name}_p{q}": float(np.percentile(values, q)) for q in PERCENTILES}


def sample_counts(samples: pa.Table, prompts: int, selected: int) -> dict:
    """Counts over ``samples``; ``selected`` is what should have a row: the ``prompts``, or their turns with
    ``turns: all``."""
    ok = samples.filter(pc.equal(samples["status"], "ok"))
    n_ok = ok.num_rows
    completion = ok["completion_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
    reasoning_chars = pc.fill_null(pc.utf8_length(ok["reasoning"]), 0).to_numpy(zero_copy_only=False)
    truncated = int(pc.sum(ok["truncated"]).as_py() or 0)
    return {
        "prompts_selected": prompts,
        "requests_selected": selected,
        "ok": n_ok,
        "errors": samples.num_rows - n_ok,
        "missing": selected - samples.num_rows,
        "truncated": truncated,
        "unfinished_thinking": int(pc.sum(ok["unfinished_thinking"]).as_py() or 0),
        "truncation_rate": truncated / n_ok if n_ok else 0.0,
        "error_rate": (selected - n_ok) / selected if selected else 0.0,
        "prompt_tokens_total": int(pc.sum(ok["prompt_tokens"]).as_py() or 0),
        "completion_tokens_total": int(completion.sum()),
        **percentiles("completion_tokens", completion),
        **percentiles("reasoning_chars", reasoning_chars),
    }


def capture_counts(report: CaptureReport | None, wall_s: float, reasoning_parser: str | None) -> dict:
    """What this materialization's capture did (only ``captured_this_run: 0`` when nothing was asked)."""
    if report is None:
        return {"captured_this_run": 0}
    progress = report.progress
    return {
        "captured_this_run": progress.done,
        "errors_this_run": progress.errors,
        "http_attempts": report.http_attempts,
        "http_retries": max(report.http_attempts - progress.done, 0),
        "requests_per_s": progress.requests_per_s,
        "output_tokens_per_s": progress.tokens_per_s,
        "capture_s": progress.elapsed_s,
        "wall_s": wall_s,
        "server_model": report.server_model,
        "vllm_version": report.vllm_version,
        "reasoning_parser": reasoning_parser or "none",
    }


def quality_counts(samples: pa.Table) -> dict:
    """Count and share per class (numbers, so the UI plots them over materializations)."""
    counts = count_classes(samples["quality"].to_pylist())
    total = max(samples.num_rows, 1)
    return {
        **{f"quality/{name}": counts[name] for name in QUALITY_CLASSES},
        **{f"quality/{name}_share": counts[name] / total for name in QUALITY_CLASSES},
        "quality/non_ok_share": (samples.num_rows - counts["ok"]) / total,
    }


def quality_line(quality: dict) -> str:
    """The classes present and their shares, for the log: ``ok 90.0%, truncated 10.0%``."""
    return ", ".join(
        f"{cls} {quality[f'quality/{cls}_share']:.1%}" for cls in QUALITY_CLASSES if quality[f"quality/{cls}"]
    )


def _short_text(row: dict, chars: int = 80) -> str:
    """The end of what the sample says: its answer, else its thinking, else its error."""
    text = " ".join((row["content"] or row["reasoning"] or row["error"] or "").split())
    return text if len(text) <= chars else "…" + text[-chars:]


def quality_examples(samples: pa.Table) -> str:
    """A Markdown table: per class, its count, share and the first few samples (id and the end of the text)."""
    counts = count_classes(samples["quality"].to_pylist())
    total = max(samples.num_rows, 1)
    lines = ["| class | samples | share | examples |", "|---|---|---|---|"]
    for name in QUALITY_CLASSES:
        rows = samples.filter(pc.equal(samples["quality"], name)).slice(0, EXAMPLES_PER_CLASS).to_pylist()
        examples = "<br>".join(f"`{r['prompt_id'][:12]}` {_short_text(r)}" for r in rows)
        lines.append(f"| {name} | {counts[name]} | {counts[name] / total:.1%} | {examples} |")
    return "\n".join(lines)


def variant_ok_samples(samples: pa.Table, variants: Sequence[SamplingVariant]) -> dict[str, int]:
    """Ok samples per variant, by the variant each row names (empty without variants)."""
    if not variants:
        return {}
    counts = {v.name: 0 for v in variants}
    ok = samples.filter(pc.equal(samples["status"], "ok"))
    for sampling in ok["sampling"].to_pylist():
        name = json.loads(sampling).get("variant") if sampling else None
        if name in counts:
            counts[name] += 1
    return counts


def error_examples(samples: pa.Table, shown: int = ERROR_EXAMPLES) -> list[str]:
    """The first ``shown`` error rows, one line each."""
    errors = samples.filter(pc.equal(samples["status"], "error"))
    return [
        f"prompt {pid}: {error} (retried on the next materialization)"
        for pid, error in zip(errors["prompt_id"].to_pylist()[:shown], errors["error"].to_pylist()[:shown])
    ]
