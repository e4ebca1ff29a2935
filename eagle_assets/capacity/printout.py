"""The capacity plan as ``eagle-assets plan`` prints it: the stages, stored vs online features side by side,
whether the storage root has room, and a note on where each number comes from."""

from __future__ import annotations

from eagle_assets.capacity.plan import EPOCHS, ONLINE, STORED, CapacityPlan
from eagle_assets.core.layout import BF16, EAGLE3_CHECKPOINT, FP8, HIDDEN_STATES
from eagle_assets.core.units import human_bytes

# The features table's columns: stored features in either dtype; online's scratch cap holds either.
FEATURE_COLUMNS = ((STORED, BF16, "stored (bf16)"), (STORED, FP8, "stored (fp8)"), (ONLINE, BF16, ONLINE))


def plan_lines(plan: CapacityPlan) -> list[str]:
    """The plan as the ``eagle-assets plan`` command prints it."""
    shape, stats = plan.shape, plan.stats
    lines = [
        f"verifier: {shape.name} (hidden {shape.hidden_size}, {shape.num_layers} layers, vocab {shape.vocab_size:,}, "
        f"captured layers {shape.layer_ids})",
        f"data: {stats.source}",
        f"tokens: {stats.tokens:,} ({stats.seq_tokens:,.0f} per sample)",
        "",
        f"{'stage':<19} {'disk (bf16)':>13} {'disk (fp8)':>13} {'GPU-hours':>10}",
    ]
    notes = []
    for i, s in enumerate(plan.stages, 1):
        hours = "-" if s.gpu_hours is None else f"{s.gpu_hours:,.1f}"
        lines.append(f"{s.stage:<19} {human_bytes(s.bytes_bf16):>13} {human_bytes(s.bytes_fp8):>13} {hours:>10}  [{i}]")
        notes.append(f"[{i}] {s.stage}: disk {s.bytes_source}; GPU-hours: {s.gpu_hours_source}")
    lines.append(
        f"{'total':<19} {human_bytes(plan.total(BF16)):>13} {human_bytes(plan.total(FP8)):>13} "
        f"{plan.gpu_hours(STORED):>10,.1f}"
    )
    lines += ["", *features_lines(plan), ""]
    free = human_bytes(plan.free_bytes)
    for what, dtype, features in (
        (f"{BF16} features", BF16, STORED),
        (f"{FP8} features", FP8, STORED),
        ("online features", BF16, ONLINE),
    ):
        total = plan.total(dtype, features)
        verdict = (
            "fits" if total <= plan.free_bytes else f"does NOT fit (short by {human_bytes(total - plan.free_bytes)})"
        )
        lines.append(f"storage root {plan.storage_root} ({free} free): {what} {verdict}")
    return [*lines, "", *notes, features_note(plan)]


def _note_numbers(plan: CapacityPlan) -> dict[str, int]:
    """Each stage's note number, and the features note's after them."""
    return {**{s.stage: i for i, s in enumerate(plan.stages, 1)}, "features": len(plan.stages) + 1}


def features_lines(plan: CapacityPlan) -> list[str]:
    """Stored vs online features side by side: disk at the peak and after the run, GPU-hours."""
    training = plan.stage(EAGLE3_CHECKPOINT).gpu_hours or 0.0
    rows = {
        "disk at the peak": [human_bytes(plan.total(d, f)) for f, d, _ in FEATURE_COLUMNS],
        "disk after the run": [human_bytes(plan.kept(d, f)) for f, d, _ in FEATURE_COLUMNS],
        "extraction GPU-hours": [f"{plan.extraction_gpu_hours(f):,.1f}" for f, _, _ in FEATURE_COLUMNS],
        "training GPU-hours": [f"{training:,.1f}" for _ in FEATURE_COLUMNS],
        "GPU-hours in all": [f"{plan.gpu_hours(f):,.1f}" for f, _, _ in FEATURE_COLUMNS],
    }
    header = f"{'features':<20}" + "".join(f"{label:>14}" for _, _, label in FEATURE_COLUMNS)
    return [
        f"{header}  [{_note_numbers(plan)['features']}]",
        *(f"{label:<20}" + "".join(f"{v:>14}" for v in row) for label, row in rows.items()),
    ]


def features_note(plan: CapacityPlan) -> str:
    """How the features table counts: what each mode writes, and GPU-hours for two jobs at once."""
    extraction, training = plan.extraction_gpu_hours(ONLINE), plan.stage(EAGLE3_CHECKPOINT).gpu_hours or 0.0
    numbers = _note_numbers(plan)
    note, hidden, trainer = numbers["features"], numbers[HIDDEN_STATES], numbers[EAGLE3_CHECKPOINT]
    return (
        f"[{note}] features: stored = {HIDDEN_STATES} extracted once [{hidden}] and read by the trainer for "
        f"{EPOCHS} epochs [{trainer}]; online = a vLLM extract_hidden_states server writes each row the trainer "
        f"loads into a scratch folder capped at {human_bytes(plan.scratch_cap_bytes)} (--scratch-cap-gb, counted "
        f"in full), deleted once loaded, so no {HIDDEN_STATES} stays on disk but extraction repeats every epoch: "
        f"{EPOCHS} x [{hidden}] (every row counted, an upper bound: the trainer reads the train and validation "
        f"rows) + [{trainer}]. GPU-hours are busy GPU time at the measured per-GPU rates of [{hidden}] and "
        f"[{trainer}]; online, server and trainer run at once on separate GPUs of the host, which shortens the "
        f"wall time, not the GPU-hours: both stay busy with {extraction / (extraction + training):.0%} of the "
        "GPUs extracting (their wall time: extraction + training GPU-hours / the host's GPUs)."
    )
