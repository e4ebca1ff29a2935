"""``eagle-assets plan``: from command-line values to the printed (or JSON) capacity plan."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from eagle_assets.capacity.measure import TokenStats, assumed_token_stats, measure_token_stats
from eagle_assets.capacity.plan import ONLINE, STORED, CapacityPlan, build_plan
from eagle_assets.capacity.printout import plan_lines
from eagle_assets.capacity.shapes import load_shape
from eagle_assets.capacity.throughput import Rate
from eagle_assets.core.layout import FEATURE_DTYPES
from eagle_assets.resources.storage import default_root


def _aux(text: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--aux-layers {text!r}: give comma-separated layer ids, e.g. 2,30,58") from None


def _stats(
    root: Path, partitions: list[str], prompts: int | None, prompt_tokens: float | None, completion_tokens: float | None
) -> TokenStats:
    if partitions:
        stats = measure_token_stats(root, partitions, prompts)
    elif prompts is None:
        raise ValueError("give --prompts N or --partition P (a materialized prompts partition)")
    else:
        stats = assumed_token_stats(prompts)
    if prompt_tokens is None and completion_tokens is None:
        return stats
    return dataclasses.replace(
        stats,
        prompt_tokens=prompt_tokens or stats.prompt_tokens,
        completion_tokens=completion_tokens or stats.completion_tokens,
        source=f"{stats.source}; overridden on the command line: prompt {prompt_tokens or '-'}, "
        f"completion {completion_tokens or '-'} tokens per sample",
    )


def capacity_plan(
    verifier: str,
    prompts: int | None,
    partitions: list[str],
    root: Path | None,
    aux_layers: str = "",
    prompt_tokens: float | None = None,
    completion_tokens: float | None = None,
    generation_tok_s: float | None = None,
    generation_gpus: int = 8,
    scratch_cap_gb: float | None = None,
) -> CapacityPlan:
    root = Path(root or default_root())
    shape = load_shape(verifier, _aux(aux_layers))
    generation = None
    if generation_tok_s:
        generation = Rate(
            generation_tok_s / generation_gpus,
            f"given on the command line: {generation_tok_s:,.0f} tok/s per replica of {generation_gpus} GPUs",
        )
    stats = _stats(root, partitions, prompts, prompt_tokens, completion_tokens)
    return build_plan(shape, stats, root, generation, scratch_cap_gb=scratch_cap_gb)


def plan_report(
    verifier: str,
    prompts: int | None,
    partitions: list[str],
    root: Path | None,
    aux_layers: str = "",
    prompt_tokens: float | None = None,
    completion_tokens: float | None = None,
    generation_tok_s: float | None = None,
    generation_gpus: int = 8,
    scratch_cap_gb: float | None = None,
    as_json: bool = False,
) -> list[str]:
    plan = capacity_plan(
        verifier,
        prompts,
        partitions,
        root,
        aux_layers,
        prompt_tokens,
        completion_tokens,
        generation_tok_s,
        generation_gpus,
        scratch_cap_gb,
    )
    if not as_json:
        return plan_lines(plan)
    return [
        json.dumps(
            {
                "verifier": plan.shape.name,
                "layer_ids": plan.shape.layer_ids,
                "hidden_size": plan.shape.hidden_size,
                "token_stats": plan.stats.source,
                "tokens": plan.stats.tokens,
                "stages": [dataclasses.asdict(s) for s in plan.stages],
                "total_bytes": {"bfloat16": plan.total("bfloat16"), "fp8": plan.total("fp8")},
                "storage_root": str(plan.storage_root),
                "free_bytes": plan.free_bytes,
                "fits": {"bfloat16": plan.fits("bfloat16"), "fp8": plan.fits("fp8")},
                "scratch_cap_bytes": plan.scratch_cap_bytes,
                "features": {
                    features: {
                        "peak_bytes": {dtype: plan.total(dtype, features) for dtype in FEATURE_DTYPES},
                        "kept_bytes": {dtype: plan.kept(dtype, features) for dtype in FEATURE_DTYPES},
                        "extraction_gpu_hours": plan.extraction_gpu_hours(features),
                        "gpu_hours": plan.gpu_hours(features),
                    }
                    for features in (STORED, ONLINE)
                },
            },
            indent=2,
        )
    ]
