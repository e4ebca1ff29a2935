"""Draft-training hyperparameters: one pydantic model, shared by the asset's launchpad config and scripts.

Row length, draft vocabulary and learning rate fit the verifier unless set: :func:`resolve_settings`
fills them from its text config and speculators' own recipe (read from speculators itself), so a
Kimi-K2.5 run with defaults trains on whole 8K-token reasoning samples and a 32K draft vocabulary. The
embedded demo's small recipe (512-token rows, 256-token draft vocabulary, lr 3e-3, tuned on the tiny
verifier) lives in the demo's own run config (``eagle_assets.demo.command.DEMO_OPS``). speculators 0.9.0's
trainer has no gradient accumulation: one optimizer step sees ``total_seq_len`` tokens per process, so
the batch grows with ``num_processes`` (data parallel through ``torchrun``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field


class TrainingSettings(BaseModel):
    num_layers: int = Field(default=1, ge=1, description="Draft decoder layers.")
    ttt_steps: int = Field(
        default=3,
        ge=1,
        description="Test-time-training steps the draft is unrolled over "
        "(train for as many steps as the speculative tokens you will serve).",
    )
    lr: float | None = Field(
        default=None,
        gt=0,
        description="Learning rate (Muon for 2-D weights, AdamW for the rest); unset = speculators' default (1e-3).",
    )
    epochs: int = Field(default=5, ge=1, description="Maximum training epochs.")
    draft_vocab_size: int | None = Field(
        default=None,
        ge=1,
        description="Draft vocabulary size: the most "
        "frequent supervised tokens; unset = speculators' 32000, or half the "
        "verifier's vocabulary when that is smaller.",
    )
    total_seq_len: int | None = Field(
        default=None,
        ge=16,
        description="Tokens per packed training row (= per "
        "optimizer step and process; longer samples are truncated); unset = a "
        "prompt allowance plus the 8K generation budget, capped at the "
        "verifier's context.",
    )
    attention_impl: Literal["auto", "simple_flex_attention", "sdpa", "eager"] = Field(
        default="auto",
        description="Draft attention kernel; auto = flex attention on GPU, sdpa on CPU "
        "(flex attention has no CPU backward).",
    )
    loss_implementation: Literal["auto", "fused", "eager"] = Field(
        default="auto",
        description="Draft loss kernel; auto = speculators' fused Triton loss on GPU (an online "
        "softmax: no float32 [tokens, draft vocab] intermediates), eager on CPU (the fused kernel needs a GPU).",
    )
    compute_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto",
        description="Autocast compute dtype and the dtype features are loaded in (speculators' "
        "hidden_states_dtype; master weights stay float32, checkpoints are saved in bfloat16); auto = bfloat16 "
        "on GPU, float32 on CPU (CPU bf16 matmuls convert on every call: the demo's training took 128 s in "
        "bfloat16 and 92 s in float32 on 2 cores, same validation loss and acceptance).",
    )
    seed: int = Field(default=0, description="Seed for initialisation and packing order.")
    num_processes: int = Field(
        default=1,
        ge=0,
        description="Training processes, one per GPU; 0 = every "
        "visible GPU (1 without GPUs); above 1 the run is launched with torchrun (DDP).",
    )
    dataloader_workers: int | None = Field(
        default=None,
        ge=0,
        description="DataLoader worker processes; "
        "unset = none on CPU; on GPU one per CPU core left to each training process, as many as the host's "
        "shared memory (/dev/shm) holds. Each worker keeps 5 batches there (an 8B verifier's 9,216-token "
        "rows: ~1.5 GB); more than fit is refused.",
    )
    cpu_threads: int = Field(
        default=1,
        ge=1,
        description="Intra-op threads when training on CPU. Drafts "
        "of tiny verifiers gain little from more, and OpenMP threads on cores that other "
        "processes also use run many times slower (measured 30x with 2 threads on 2 busy cores).",
    )
    early_stop_patience: int = Field(
        default=2,
        ge=0,
        description="Stop after this many epochs without a better validation loss (0: never stop early).",
    )
    log_every_steps: int = Field(
        default=10,
        ge=1,
        description="Record training metrics every N optimizer "
        "steps (each record synchronises the GPU, so keep it above 1 there).",
    )


# reasoning_samples' default max_tokens: the longest completion a sample can hold.
GENERATION_BUDGET = 8192
# Room for the prompt in front of it (chat template and system prompt included).
PROMPT_ALLOWANCE = 1024
RESOLVED_FIELDS = ("total_seq_len", "draft_vocab_size", "lr")


@dataclass(frozen=True)
class VerifierShape:
    """What the defaults depend on: the verifier's vocabulary and context length."""

    vocab_size: int
    context_length: int | None  # max_position_embeddings; None when the config does not say

    @classmethod
    def of(cls, text_config) -> VerifierShape:
        """From the decoder's config (a backend's ``text_config``: the nested one for Kimi-K2.5)."""
        context = getattr(text_config, "max_position_embeddings", None)
        return cls(int(text_config.vocab_size), int(context) if context else None)


def speculators_recipe() -> dict[str, float | int]:
    """speculators' own defaults for EAGLE-3 training, read from speculators 0.9's config classes."""
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig
    from speculators.train.config.schema import DataArgs, OptimizerArgs

    return {
        "lr": OptimizerArgs.model_fields["lr"].default,
        "total_seq_len": DataArgs.model_fields["total_seq_len"].default,
        "draft_vocab_size": Eagle3SpeculatorConfig.model_fields["draft_vocab_size"].default,
    }


def resolve_settings(
    settings: TrainingSettings, shape: VerifierShape, recipe: dict[str, float | int] | None = None
) -> tuple[TrainingSettings, dict[str, str]]:
    """``settings`` with every unset field of :data:`RESOLVED_FIELDS` filled for this verifier, and, for
    each field filled, how its value was reached (for the step log and lineage). Set fields win."""
    recipe = recipe or speculators_recipe()
    whole_sample = PROMPT_ALLOWANCE + GENERATION_BUDGET
    rows = min(whole_sample, shape.context_length) if shape.context_length else whole_sample
    # A pruned draft head only pays off when the vocabulary is large; for small ones keep the
    # frequent half, so the head still differs from the verifier's (vLLM loads such a draft with d2t/t2d).
    vocab = min(int(recipe["draft_vocab_size"]), max(1, shape.vocab_size // 2))
    candidates = {
        "total_seq_len": (
            rows,
            f"prompt allowance {PROMPT_ALLOWANCE} + generation budget {GENERATION_BUDGET}"
            f", capped at the verifier's context {shape.context_length}",
        ),
        "draft_vocab_size": (
            vocab,
            f"min(speculators' {recipe['draft_vocab_size']}, half the verifier's vocabulary {shape.vocab_size})",
        ),
        "lr": (recipe["lr"], "speculators' default"),
    }
    filled = {name: candidates[name] for name in RESOLVED_FIELDS if getattr(settings, name) is None}
    resolved = settings.model_copy(update={name: value for name, (value, _) in filled.items()})
    return resolved, {name: f"{value} ({why})" for name, (value, why) in filled.items()}
