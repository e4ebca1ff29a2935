"""The demo's closing lines: the training run's checkpoint, the captured samples' quality, τ held-out and
out of distribution, and the checkpoint's lineage."""

from __future__ import annotations

import dagster as dg

from eagle_assets.lineage.record import LineageError, read_lineage
from eagle_assets.lineage.render import summary_lines
from eagle_assets.reasoning_samples.quality import QUALITY_CLASSES


def _latest(instance: dg.DagsterInstance, asset: str, training_run: str):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[training_run]), limit=1
    ).records
    return records[0].asset_materialization if records else None


def outcome(instance: dg.DagsterInstance, training_run: str) -> list[str]:
    """The demo's last lines: ``checkpoint=<path>``, the captured samples' quality shares,
    ``acceptance_length=<τ>`` (held-out, in-distribution),
    ``ood_acceptance_length=<τ>`` (the out-of-distribution set, when evaluated) and the lineage summary,
    from the training run's latest checkpoint and evaluation materializations (empty when it has neither)."""
    checkpoint = _latest(instance, "eagle3_checkpoint", training_run)
    if checkpoint is None:
        return []
    path = checkpoint.metadata["path"].value
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
    evaluation = _latest(instance, "eagle3_eval", training_run)
    if evaluation is not None:
        meta = {key: value.value for key, value in evaluation.metadata.items()}
        k = meta["num_speculative_tokens"]
        heldout, ood = meta["eval_set"], meta["ood_eval_set"]

        def per_position(label: str) -> str:
            return " / ".join(f"{meta[f'{label}/acceptance_pos_{i}']:.3f}" for i in range(1, k + 1))

        detail = (
            f"held out: {heldout}, {meta[f'{heldout}/prompts_evaluated']} prompts; vLLM greedy K={k}; "
            f"per position {per_position(heldout)}"
        )
        if f"{heldout}/simulated_acceptance_length" in meta:
            detail += f"; simulated {meta[f'{heldout}/simulated_acceptance_length']:.3f}"
        lines += [f"acceptance_length={meta[f'{heldout}/acceptance_length']:.3f}", f"  ({detail})"]
        variants = sorted(
            {
                key.split("/")[1]
                for key in meta
                if key.startswith(f"{heldout}/variant[") and key.endswith("/acceptance_length")
            }
        )
        if variants:
            lines.append(
                "  per sampling variant: "
                + ", ".join(
                    f"{name.removeprefix('variant[').removesuffix(']')} "
                    f"τ {meta[f'{heldout}/{name}/acceptance_length']:.3f} "
                    f"({meta[f'{heldout}/{name}/prompts_evaluated']} prompts)"
                    for name in variants
                )
            )
        if f"{ood}/acceptance_length" in meta:
            lines += [
                f"ood_acceptance_length={meta[f'{ood}/acceptance_length']:.3f}",
                f"  (out-of-distribution: {ood}, {meta[f'{ood}/prompts_evaluated']} prompts; per position "
                f"{per_position(ood)})",
            ]
    try:
        lines += ["lineage:", *summary_lines(read_lineage(path), path)]
    except LineageError as exc:
        lines.append(f"lineage: {exc}")
    return lines
