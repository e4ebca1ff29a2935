"""The tiny verifiers' networks, trained with plain torch on CPU: tiny-qwen3's Qwen3 config here,
tiny-kimi's DeepSeek-V3 config in :mod:`eagle_assets.tiny_verifier.kimi`; one training loop for both."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

import torch
from transformers import AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel, Qwen3Config

from eagle_assets.tiny_verifier.recipe import TinyVerifierRecipe


def model_config(recipe: TinyVerifierRecipe, vocab_size: int, pad_id: int, eos_id: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
        # Untied, so the checkpoint holds both model.embed_tokens.weight and lm_head.weight, as the
        # large verifiers EAGLE-3 drafts are built for do.
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )


def _batches(rows: list[tuple[list[int], list[int]]], batch_size: int, pad_id: int, rng: random.Random):
    """Endless shuffled batches, right-padded: (input_ids, labels).

    No attention mask: with causal attention a real token never sees the padding to its right, and
    padded positions carry no label, so the mask would only push SDPA off its fused causal kernel.

    Rows of similar length share a batch (sorted within windows of 32 batches), which cuts the
    padding that would otherwise cost a third of the CPU time.
    """
    window = batch_size * 32
    while True:
        order = list(range(len(rows)))
        rng.shuffle(order)
        batches = []
        for w in range(0, len(order), window):
            chunk = sorted(order[w : w + window], key=lambda i: len(rows[i][0]))
            batches += [chunk[s : s + batch_size] for s in range(0, len(chunk) - batch_size + 1, batch_size)]
        rng.shuffle(batches)
        for members in batches:
            batch = [rows[i] for i in members]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((batch_size, width), pad_id, dtype=torch.long)
            labels = torch.full((batch_size, width), -100, dtype=torch.long)
            for r, (row_ids, mask) in enumerate(batch):
                n = len(row_ids)
                ids[r, :n] = torch.tensor(row_ids)
                labels[r, :n] = torch.tensor([t if m else -100 for t, m in zip(row_ids, mask)])
            yield ids, labels


def train_model(
    config: PreTrainedConfig,
    rows: list[tuple[list[int], list[int]]],
    recipe: TinyVerifierRecipe,
    log: Callable[[str], None] = print,
) -> PreTrainedModel:
    """The causal LM of ``config``, trained by AdamW with warmup and cosine decay; loss only on
    completion tokens (mask 1)."""
    torch.manual_seed(recipe.seed)
    model = AutoModelForCausalLM.from_config(config)
    model.train()
    optim = torch.optim.AdamW(
        model.parameters(),
        lr=recipe.learning_rate,
        weight_decay=recipe.weight_decay,
        betas=(0.9, 0.95),
        fused=True,
    )

    def lr_at(step: int) -> float:
        if step < recipe.warmup_steps:
            return (step + 1) / recipe.warmup_steps
        progress = (step - recipe.warmup_steps) / max(1, recipe.train_steps - recipe.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_at)
    batches = _batches(rows, recipe.batch_size, config.pad_token_id, random.Random(recipe.seed))
    started = last_log = time.monotonic()
    for step in range(recipe.train_steps):
        ids, labels = next(batches)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        optim.zero_grad(set_to_none=True)
        now = time.monotonic()
        if now - last_log > 5 or step == recipe.train_steps - 1:
            last_log = now
            log(
                f"tiny verifier: step {step + 1}/{recipe.train_steps} loss {loss.item():.4f} "
                f"({(step + 1) / (now - started):.1f} steps/s)"
            )
    model.eval()
    return model
