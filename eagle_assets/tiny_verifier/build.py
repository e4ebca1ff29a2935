"""Build an embedded tiny verifier into a folder: tokenizer, template, config, trained weights.

The cache runs it in a child process (``python -m eagle_assets.tiny_verifier``) so that the OpenMP
environment (threads, wait policy) is set before torch loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import GenerationConfig

from eagle_assets.tiny_verifier import kimi
from eagle_assets.tiny_verifier.cache import RECIPE_FILE
from eagle_assets.tiny_verifier.corpus import make_conversations
from eagle_assets.tiny_verifier.model import model_config, train_model
from eagle_assets.tiny_verifier.recipe import RECIPE_VERSION, TinyKimiRecipe, TinyVerifierRecipe, recipe_hash
from eagle_assets.tiny_verifier.tokenizer import (
    KIMI_MARKUP,
    QWEN_MARKUP,
    conversation_texts,
    encode_conversation,
    train_tokenizer,
)


def build_tiny_verifier(out_dir: Path, recipe: TinyVerifierRecipe, log: Callable[[str], None] = print) -> Path:
    """Write a complete Hugging Face model folder to ``out_dir`` (which must be empty or absent)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    is_kimi = isinstance(recipe, TinyKimiRecipe)
    markup = KIMI_MARKUP if is_kimi else QWEN_MARKUP
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        # Separate seeds: the tokenizer corpus and the training rows are different samples.
        tokenizer = train_tokenizer(
            conversation_texts(make_conversations(recipe.tokenizer_corpus_samples, recipe.seed + 1, recipe)),
            recipe.vocab_size,
            markup,
        )
        conversations = make_conversations(recipe.train_steps * recipe.batch_size, recipe.seed + 2, recipe)
        rows = [encode_conversation(tokenizer, conv) for conv in conversations]
        log(
            f"tiny verifier: {recipe.kind}, vocab {len(tokenizer)}, {len(rows)} training rows, "
            f"mean length {sum(len(r[0]) for r in rows) / len(rows):.0f} tokens"
        )
        pad_id, eos_id = tokenizer.convert_tokens_to_ids([markup.pad, markup.eos])
        vocab = -(-len(tokenizer) // recipe.model_vocab_multiple) * recipe.model_vocab_multiple
        config = (
            kimi.text_config(recipe, vocab, pad_id=pad_id, eos_id=eos_id)
            if is_kimi
            else model_config(recipe, vocab, pad_id=pad_id, eos_id=eos_id)
        )
        model = train_model(config, rows, recipe, log=log)
    finally:
        torch.set_num_threads(threads)
    # Only the stop token: sampling defaults are left to the caller (vLLM would otherwise adopt them).
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    if is_kimi:
        kimi.save_wrapped(model, out_dir, recipe, media_pad_id=tokenizer.convert_tokens_to_ids(kimi.MEDIA_PAD))
    else:
        model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / RECIPE_FILE).write_text(
        json.dumps(
            {"recipe_hash": recipe_hash(recipe), "version": RECIPE_VERSION, "kind": recipe.kind, **asdict(recipe)},
            indent=2,
        )
    )
    return out_dir
