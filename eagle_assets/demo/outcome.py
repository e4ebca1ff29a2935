"""The demo's closing lines: the training run's checkpoint, the captured samples' quality, τ held-out and
out of distribution (and along the output), and the checkpoint's lineage."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from eagle_assets.core.layout import EAGLE3_CHECKPOINT, EAGLE3_EVAL
from eagle_assets.core.partitions import latest_metadata
from eagle_assets.demo.display import LINE_WIDTH
from eagle_assets.eagle3_eval.per_request import POSITION_EDGES, bin_key, bin_label
from eagle_assets.lineage.record import LineageError, read_lineage
from eagle_assets.lineage.render import summary_lines
from eagle_assets.reasoning_samples.quality import QUALITY_CLASSES


def outcome(instance: dg.DagsterInstance, training_run: str) -> list[str]:
    """The demo's last lines: ``checkpoint=<path>``, the captured samples' quality shares,
    the evaluation's lines (:func:`evaluation_lines`) and the lineage summary,
    from the training run's latest checkpoint and evaluation materializations (empty when it has neither)."""
    checkpoint = latest_metadata(instance, EAGLE3_CHECKPOINT, training_run)
    if checkpoint is None:
        return []
    path = checkpoint["path"]
    lines = [f"checkpoint={path}"]
    samples = instance.get_latest_materialization_event(dg.AssetKey("reasoning_samples"))
    if samples is not None and "quality/non_ok_share" in samples.asset_materialization.metadata:
        meta = samples.asset_materialization.metadata
        shares = ", ".join(
            f"{name} {meta[f'quality/{name}_share'].value:.1%}"
            for name in QUALITY_CLASSES
            if meta[f"quality/{name}"].value
        )
        lines.append(f"sample quality ({samples.asset_materialization.partition}): {shares}")
    evaluation = latest_metadata(instance, EAGLE3_EVAL, training_run)
    if evaluation is not None:
        lines += evaluation_lines(evaluation)
    try:
        lines += ["lineage:", *summary_lines(read_lineage(path), path)]
    except LineageError as exc:
        lines.append(f"lineage: {exc}")
    return lines


def fitted(head: str, parts: Sequence[str | None], width: int = LINE_WIDTH, first: str = "; ") -> str:
    """``head`` and as many of ``parts`` (in order, ``first`` before the first, "; " between; None left out) as
    fit in ``width`` characters, closed by ")"."""
    line, separator = head, first
    for part in filter(None, parts):
        if len(f"{line}{separator}{part})") <= width:
            line, separator = f"{line}{separator}{part}", "; "
    return line + ")"


def fitted_keeping(heads: Sequence[str], parts: Sequence[str | None], kept: Sequence[str | None]) -> str:
    """:func:`fitted` under the first of ``heads`` (fullest first) that fits and leaves room for every part of
    ``kept`` (None left out); the last head's line when none does."""
    for head in heads:
        line = fitted(head, parts)
        if len(line) <= LINE_WIDTH and all(part in line for part in filter(None, kept)):
            break
    return line


def bins_seen(meta: dict, label: str) -> list[tuple[str, float, int]]:
    """(bin, τ, steps) of the output-position bins the set's per-request steps fell in, in order."""
    bounds = [*POSITION_EDGES[1:], None]
    seen = []
    for start, end in zip(POSITION_EDGES, bounds):
        key = bin_key(start, end)
        if f"{label}/tau_{key}" in meta:
            seen.append((bin_label(start, end), meta[f"{label}/tau_{key}"], meta[f"{label}/steps_{key}"]))
    return seen


def along_the_output(meta: dict, label: str, name: str) -> str | None:
    """τ in the first and the last output-position bin (output tokens) of a set: ``held out 0-512 τ 3.610 →
    4K-8K τ 3.120``."""
    seen = bins_seen(meta, label)
    if not seen:
        return None
    (first, first_tau, _), (last, last_tau, _) = seen[0], seen[-1]
    if len(seen) == 1:  # every step started in the first bin
        return f"{name} {first} τ {first_tau:.3f}"
    return f"{name} {first} τ {first_tau:.3f} → {last} τ {last_tau:.3f}"


def _ci(meta: dict, label: str) -> str | None:
    low, high = meta.get(f"{label}/tau_ci_low"), meta.get(f"{label}/tau_ci_high")
    return None if low is None else f"95% CI {low:.3f}-{high:.3f}"


def evaluation_lines(meta: dict) -> list[str]:
    """At most 4 lines of an ``eagle3_eval``'s metadata: ``acceptance_length=<τ>`` (held out) and its detail
    (prompts, simulated τ, τ per sampling variant, the bootstrap interval), ``ood_acceptance_length=<τ>`` (the
    out-of-distribution set, when evaluated) and its detail with τ in the first and last output-position bins
    of each set, which always fit; each line fits the terminal (what does not fit is in the UI and the log file)."""
    k = meta["num_speculative_tokens"]
    heldout, ood = meta["eval_set"], meta["ood_eval_set"]
    variants = sorted(
        {
            key.split("/")[1]
            for key in meta
            if key.startswith(f"{heldout}/variant[") and key.endswith("/acceptance_length")
        }
    )
    per_variant = None
    if variants:
        per_variant = "per sampling variant: " + ", ".join(
            f"{name.removeprefix('variant[').removesuffix(']')} "
            f"τ {meta[f'{heldout}/{name}/acceptance_length']:.3f} "
            f"({meta[f'{heldout}/{name}/prompts_evaluated']} prompts)"
            for name in variants
        )
    simulated = meta.get(f"{heldout}/simulated_acceptance_length")
    positions = " / ".join(f"{meta[f'{heldout}/acceptance_pos_{i}']:.2f}" for i in range(1, k + 1))
    parts = [
        None if simulated is None else f"simulated {simulated:.3f}",
        per_variant,
        _ci(meta, heldout),
        f"K={k}, per position {positions}",
    ]
    prompts = meta[f"{heldout}/prompts_evaluated"]
    # τ per variant matters more than the set's name.
    heads = [f"  (held out: {heldout}, {prompts} prompts", f"  ({prompts} prompts"]
    lines = [
        f"acceptance_length={meta[f'{heldout}/acceptance_length']:.3f}",
        fitted_keeping(heads, parts, [per_variant]),
    ]
    along = [along_the_output(meta, heldout, "held out")]
    if f"{ood}/acceptance_length" in meta:
        along.append(along_the_output(meta, ood, "ood"))
        ood_prompts = meta[f"{ood}/prompts_evaluated"]
        # The bins are kept before the set's name: a long label leaves them no room otherwise.
        heads = [
            f"  (out-of-distribution: {ood}, {ood_prompts} prompts",
            f"  (out-of-distribution, {ood_prompts} prompts",
        ]
        lines += [
            f"ood_acceptance_length={meta[f'{ood}/acceptance_length']:.3f}",
            fitted_keeping(heads, [*along, _ci(meta, ood)], along),
        ]
    elif along[0]:
        lines.append(fitted("  (along the output", along, first=": "))
    return lines
