"""Upstream data for the token_sequences / hidden_states tests: real prompts (materialized) and
reasoning-sample shards written through the real generation store."""

from __future__ import annotations

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import LAST_TURN_ONLY
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts_family
from eagle_assets.reasoning_samples.store import ShardWriter

PARTITION = "demo"


def demo_prompts(storage_root, limit: int, **config) -> list[dict]:
    result = dg.materialize(
        [prompts_family.build(source_partitions())["assets"][0]],
        partition_key=PARTITION,
        resources={"storage": storage_root},
        run_config={"ops": {"prompts": {"config": {"limit": limit, **config}}}},
    )
    assert result.success
    return pq.read_table(storage_root.path("prompts", PARTITION) / "prompts.parquet").to_pylist()


def sample_row(prompt, tokenizer, steps: int = 1, **overrides) -> dict:
    """A reasoning sample as the generation step stores it, with prompt tokens rendered the way the
    server renders them and a completion the verifier could have written (``steps`` lines of thinking)."""
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
        "server_model": "tiny",
        "vllm_version": "test",
        "base_url": "http://127.0.0.1:0/v1",
        "latency_s": 0.1,
        "finished_at": 0.0,
    }
    row.update(overrides)
    return row


def write_samples(storage_root, rows: list[dict]) -> None:
    with ShardWriter(storage_root.path("reasoning_samples", PARTITION), rows_per_shard=5) as writer:
        for row in rows:
            writer.add(row)
