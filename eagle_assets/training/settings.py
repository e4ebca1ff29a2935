"""Draft-training hyperparameters: one pydantic model, shared by the asset's launchpad config and scripts.

Defaults are the recipe that trains the embedded tiny verifier's draft to acceptance length >= 3.5 at
three speculative tokens in a few CPU minutes; everything else is speculators' own default. Measured on
the demo partition (638 train rows, 66K tokens), validation accuracy per TTT step after 3 epochs:
lr 1e-3 / 1024-token rows 0.69/0.50/0.37 (8 epochs: 0.79/0.64/0.53, vLLM tau 2.98); lr 3e-3 / 1024
0.94/0.89/0.84; lr 3e-3 / 512 0.94/0.89/0.84 after 2 epochs already. Hence lr 3e-3, 512-token rows. speculators 0.9.0's trainer has
no gradient accumulation: one optimizer step sees ``total_seq_len`` tokens per process, so the batch
grows with ``num_processes`` (data parallel through ``torchrun``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class TrainingSettings(BaseModel):
    num_layers: int = Field(default=1, ge=1, description="Draft decoder layers.")
    ttt_steps: int = Field(default=3, ge=1, description="Test-time-training steps the draft is unrolled over "
                           "(train for as many steps as the speculative tokens you will serve).")
    lr: float = Field(default=3e-3, gt=0, description="Learning rate (Muon for 2-D weights, AdamW for the rest; "
                      "speculators' default is 1e-3).")
    epochs: int = Field(default=5, ge=1, description="Maximum training epochs.")
    draft_vocab_size: int = Field(default=256, ge=1, description="Draft vocabulary size: the most frequent "
                                  "supervised tokens. Production verifiers use about 32000.")
    total_seq_len: int = Field(default=512, ge=16, description="Tokens per packed training row (= per "
                               "optimizer step and process); longer samples are truncated.")
    attention_impl: Literal["auto", "simple_flex_attention", "sdpa", "eager"] = Field(
        default="auto", description="Draft attention kernel; auto = flex attention on GPU, sdpa on CPU "
        "(flex attention has no CPU backward).")
    seed: int = Field(default=0, description="Seed for initialisation and packing order.")
    num_processes: int = Field(default=1, ge=0, description="Training processes, one per GPU; 0 = every "
                               "visible GPU (1 without GPUs); above 1 the run is launched with torchrun (DDP).")
    dataloader_workers: int | None = Field(default=None, ge=0, description="DataLoader worker processes; "
                                           "unset = none on CPU; on GPU one per CPU core left to each training process.")
    cpu_threads: int = Field(default=1, ge=1, description="Intra-op threads when training on CPU. Drafts "
                             "of tiny verifiers gain little from more, and OpenMP threads on cores that other "
                             "processes also use run many times slower (measured 30x with 2 threads on 2 busy cores).")
    validation_fraction: float = Field(default=0.1, gt=0, lt=1, description="Fraction of the training rows "
                                       "held back (a fixed, hash-chosen slice) to pick the best epoch.")
    early_stop_patience: int = Field(default=2, ge=0, description="Stop after this many epochs without a "
                                     "better validation loss (0: never stop early).")
    log_every_steps: int = Field(default=10, ge=1, description="Record training metrics every N optimizer "
                                 "steps (each record synchronises the GPU, so keep it above 1 there).")
