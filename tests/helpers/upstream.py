"""Upstream data for the token_sequences / hidden_states tests: real prompts (materialized) and
reasoning-sample shards written through the real generation store, in a recipe's sample set."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import LAST_TURN_ONLY, REASONING_SAMPLES, asset_folder, prompts_file
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts_family
from eagle_assets.reasoning_samples.capture_partition import CaptureSettings
from eagle_assets.reasoning_samples.recipe import SERVED_FOLDER, ServedVerifier
from eagle_assets.reasoning_samples.sample_sets import open_sample_set
from eagle_assets.reasoning_samples.store import ShardWriter

PARTITION = "demo"


def model_folder(folder: Path, vocabulary: str = "v1", template: str = "{{ messages }}") -> Path:
    """A model folder with just what a recipe fingerprints (config, tokenizer, chat template), for tests
    that never load a model: ``vocabulary`` stands for the tokenizer's, ``template`` for the template."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "scripted"}))
    (folder / "tokenizer.json").write_text(json.dumps({"vocabulary": vocabulary}))
    (folder / "chat_template.jinja").write_text(template)
    return folder


def served_from(folder: Path, reasoning_parser: str | None = "qwen3") -> ServedVerifier:
    """The verifier a server of the model ``folder`` answers with."""
    return ServedVerifier.of_folder(
        folder, model=str(folder), fingerprinted=SERVED_FOLDER, reasoning_parser=reasoning_parser
    )


def demo_prompts(storage_root, limit: int, **config) -> list[dict]:
    result = dg.materialize(
        [prompts_family.build(source_partitions())["assets"][0]],
        partition_key=PARTITION,
        resources={"storage": storage_root},
        run_config={"ops": {"prompts": {"config": {"limit": limit, **config}}}},
    )
    assert result.success
    return pq.read_table(prompts_file(storage_root.root, PARTITION)).to_pylist()


def sample_row(prompt, tokenizer, steps: int = 1, **overrides) -> dict:
    """A reasoning sample as the generation step stores it, with prompt tokens rendered the way the
    server renders them and a completion the verifier could have written (``steps`` lines of thinking),
    served from the tokenizer's folder (``server_model``, as vLLM names a model it serves from a path)."""
    messages = [dict(m) for m in prompt["messages"]]
    prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer.encode(prompt_text, add_special_tokens=False)  # what vLLM's chat endpoint does
    reasoning = "\n".join(f"Step {i}: thinking about {prompt['prompt_id'][:4]}." for i in range(steps))
    content = "The answer is 7."
    completion = tokenizer.encode(f"{reasoning}\n</think>\n\n{content}<|im_end|>", add_special_tokens=False)
    row = {
        "prompt_id": prompt["prompt_id"],
        "turn": LAST_TURN_ONLY,
        "split": prompt["split"],
        "status": "ok",
        "error": None,
        "reasoning": reasoning,
        "content": content,
        "finish_reason": "stop",
        "prompt_token_ids": prompt_ids,
        "token_ids": completion,
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(completion),
        "truncated": False,
        "unfinished_thinking": False,
        "sampling": "{}",
        "server_model": tokenizer.name_or_path,
        "vllm_version": "test",
        "base_url": "http://127.0.0.1:0/v1",
        "latency_s": 0.1,
        "finished_at": 0.0,
    }
    row.update(overrides)
    return row


def write_samples(storage_root, rows: list[dict], reasoning_parser: str = "qwen3") -> str:
    """``rows`` as the current sample set of the demo partition, its recipe the default settings' and the
    verifier folder the rows name (``server_model``: the tokenizer that made their ids); the recipe id."""
    [served] = {row["server_model"] for row in rows}
    recipe = CaptureSettings().recipe(served_from(Path(served), reasoning_parser))
    partition_folder = asset_folder(storage_root.root, REASONING_SAMPLES, PARTITION)
    folder = open_sample_set(partition_folder, recipe, "new_sample_set").folder
    with ShardWriter(folder, rows_per_shard=5, recipe=recipe.recipe_id) as writer:
        for row in rows:
            writer.add(row)
    return recipe.recipe_id
