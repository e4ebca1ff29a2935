"""``turns: all`` on the session's real vLLM servers (the tiny verifier, tiny-kimi): each turn asked in
order in the context the verifier's own template renders, through token_sequences, resumed per turn."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from eagle_assets.core.layout import (
    PROMPTS,
    PROMPTS_FILE,
    current_version,
    prompts_file,
    samples_folder,
    sequences_file,
)
from eagle_assets.core.shards import shard_paths
from eagle_assets.reasoning_samples.store import (
    ShardWriter,
    load_samples,
)
from eagle_assets.reasoning_samples.turns import Answer, turn_context, user_turns
from tests.helpers.capture import kill_after_rows
from tests.helpers.synthetic import publish_table
from tests.helpers.upstream import PARTITION, demo_prompts


def multi_turn_prompts(storage_root, count: int) -> list[dict]:
    """The demo set's first ``count`` multi-turn conversations, left alone in (a new version of) the prompts
    table."""
    everything = demo_prompts(storage_root, None)
    chosen = [p for p in everything if len(user_turns(p["messages"])) > 1][:count]
    table = pq.read_table(prompts_file(storage_root.root, PARTITION))
    kept = table.filter(pc.is_in(table["prompt_id"], pc.cast([p["prompt_id"] for p in chosen], "string")))
    publish_table(Path(storage_root.root), PROMPTS, PARTITION, PROMPTS_FILE, kept)
    return chosen


def test_every_turn_is_regenerated_in_order_supervised_and_resumed_per_turn(
    storage_root, tiny_verifier, vllm_server_urls
):
    from eagle_assets.eagle3_checkpoint.training_rows import stored_rows
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.hidden_states.files import load_sample
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.resources import Verifier, VLLMServer
    from eagle_assets.token_sequences import asset as token_sequences

    conversations = {p["prompt_id"]: p["messages"] for p in multi_turn_prompts(storage_root, 3)}
    parts = source_partitions()
    built, features = token_sequences.build(parts), hidden_states.build(parts)

    def materialize():
        result = dg.materialize(
            reasoning_samples.build(parts)["assets"]
            + built["assets"]
            + built["checks"]
            + features["assets"]
            + features["checks"],
            partition_key=PARTITION,
            resources={
                "storage": storage_root,
                "verifier": Verifier(model_path=str(tiny_verifier), device="cpu"),
                "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls),
            },
            run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 160}}}},
            raise_on_error=False,
        )
        assert result.success
        [mat] = result.asset_materializations_for_node("reasoning_samples")
        return result, mat.metadata

    result, meta = materialize()
    assert meta["turns"].value == "all" and meta["captured_this_run"].value == 6
    assert meta["prompts_selected"].value == 3 and meta["requests_selected"].value == 6 and meta["missing"].value == 0
    folder = samples_folder(storage_root.root, PARTITION)
    assert meta["recipe"].value["settings"]["turns"] == "all" and meta["recipe_id"].value == folder.name
    samples = load_samples(folder).to_pylist()
    assert [(s["prompt_id"], s["turn"]) for s in samples] == [(pid, t) for pid in sorted(conversations) for t in (0, 1)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    for first, second in zip(samples[::2], samples[1::2]):
        assert first["status"] == second["status"] == "ok" and first["content"].strip()
        assert first["finished_at"] <= second["finished_at"] - second["latency_s"]  # asked after turn 0 finished
        # Turn 1 was asked with the verifier's own turn-0 answer (its thinking dropped, as the template does).
        context = turn_context(conversations[first["prompt_id"]], 1, [Answer(first["content"], first["reasoning"])])
        expected = tokenizer.apply_chat_template(context, add_generation_prompt=True, tokenize=False)
        assert second["prompt_token_ids"] == tokenizer.encode(expected, add_special_tokens=False)
        prompt_text = tokenizer.decode(second["prompt_token_ids"])
        assert first["content"].strip() in prompt_text
        dataset_answer = conversations[first["prompt_id"]][1]["content"]
        assert dataset_answer not in prompt_text

    # token_sequences: one row per turn, its exact context unsupervised and its exact answer supervised.
    rows = pq.read_table(sequences_file(storage_root.root, PARTITION)).to_pylist()
    assert [(r["prompt_id"], r["turn"]) for r in rows] == [(s["prompt_id"], s["turn"]) for s in samples]
    for row, sample in zip(rows, samples):
        prompt_len = len(sample["prompt_token_ids"])
        assert row["input_ids"] == sample["prompt_token_ids"] + sample["token_ids"]
        assert row["loss_mask"] == [0] * prompt_len + [1] * len(sample["token_ids"])
    [drift] = [c for c in result.get_asset_check_evaluations() if c.check_name == "template_drift"]
    assert drift.metadata["drift_prompt_mismatch_rate"].value == 0.0  # the local turn contexts are the server's

    # hidden_states and the training folder tell a conversation's turns apart: each row reads its own file.
    [files_check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "files_match_rows"]
    assert files_check.passed
    joined, _ = stored_rows(Path(storage_root.root), PARTITION)
    assert joined.num_rows == 6 and len(set(joined["content_id"].to_pylist())) == 6
    for row in joined.to_pylist():
        assert (
            load_sample(storage_root.path("hidden_states", PARTITION) / row["file"])["token_ids"].tolist()
            == row["input_ids"]
        )

    # Resume per turn: with only the turn-0 rows on disk, the next run asks the turn-1s alone.
    kept = [s for s in load_samples(folder).to_pylist() if s["turn"] == 0]
    for path in shard_paths(folder):
        path.unlink()
    with ShardWriter(folder, recipe=folder.name) as writer:
        for row in kept:
            writer.add(row)
    _, meta = materialize()
    assert meta["captured_this_run"].value == 3 and samples_folder(storage_root.root, PARTITION) == folder
    again = load_samples(folder).to_pylist()
    assert [s for s in again if s["turn"] == 0] == kept and len(again) == 6
    assert sum(pq.read_metadata(p).num_rows for p in shard_paths(folder)) == 6  # nothing asked twice


def test_tiny_kimi_turns_are_asked_in_the_context_its_own_template_renders(storage_root, tiny_kimi, kimi_server_urls):
    """Kimi-K2.5's template, not Qwen3's, decides what of an earlier answer stays in the next turn's
    context; the local render token_sequences relies on must still be the server's, token for token."""
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.resources import VLLMServer
    from eagle_assets.resources.embedded import embedded_resources
    from eagle_assets.token_sequences import asset as token_sequences

    conversations = {p["prompt_id"]: p["messages"] for p in multi_turn_prompts(storage_root, 2)}
    parts = source_partitions()
    built = token_sequences.build(parts)
    result = dg.materialize(
        reasoning_samples.build(parts)["assets"] + built["assets"] + built["checks"],
        partition_key=PARTITION,
        resources={
            "storage": storage_root,
            "verifier": embedded_resources("tiny-kimi")["verifier"],
            "vllm_server": VLLMServer(mode="external", base_urls=kimi_server_urls),
        },
        run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 256}}}},
        raise_on_error=False,
    )
    assert result.success
    samples = load_samples(samples_folder(storage_root.root, PARTITION)).to_pylist()
    wanted = [(pid, t) for pid in sorted(conversations) for t in range(len(user_turns(conversations[pid])))]
    assert [(s["prompt_id"], s["turn"]) for s in samples] == wanted and {s["status"] for s in samples} == {"ok"}
    tokenizer = AutoTokenizer.from_pretrained(tiny_kimi)
    by_key = {(s["prompt_id"], s["turn"]): s for s in samples}
    for pid, turn in wanted:
        answers = [Answer(by_key[pid, t]["content"], by_key[pid, t]["reasoning"]) for t in range(turn)]
        context = turn_context(conversations[pid], turn, answers)
        expected = tokenizer.apply_chat_template(context, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert by_key[pid, turn]["prompt_token_ids"] == list(expected)
    [drift] = [c for c in result.get_asset_check_evaluations() if c.check_name == "template_drift"]
    assert drift.metadata["drift_prompt_mismatch_rate"].value == 0.0
    rows = pq.read_table(sequences_file(storage_root.root, PARTITION)).to_pylist()
    assert [(r["prompt_id"], r["turn"]) for r in rows] == wanted
    for row in rows:
        sample = by_key[row["prompt_id"], row["turn"]]
        assert row["input_ids"] == sample["prompt_token_ids"] + sample["token_ids"]


def test_kill_9_mid_run_then_resume_asks_each_turn_once(storage_root, vllm_server_urls, tmp_path, tiny_verifier):
    from eagle_assets.orchestration.partitions import source_partitions
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.resources import Verifier, VLLMServer

    wanted = Counter(
        (p["prompt_id"], t) for p in multi_turn_prompts(storage_root, 8) for t in range(len(user_turns(p["messages"])))
    )
    kill_after_rows(
        {"turns": "all", "max_tokens": 160, "concurrency": 1, "shard_rows": 1},
        tmp_path,
        storage_root.root,
        vllm_server_urls[0],
        rows=3,
        verifier=tiny_verifier,
    )
    folder = samples_folder(storage_root.root, PARTITION)
    before = load_samples(folder)
    assert 0 < before.num_rows < len(wanted), "the kill did not land mid-run"

    result = dg.materialize(
        reasoning_samples.build(source_partitions())["assets"],
        partition_key=PARTITION,
        resources={
            "storage": storage_root,
            "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls),
            "verifier": Verifier(model_path=str(tiny_verifier)),
        },
        run_config={"ops": {"reasoning_samples": {"config": {"turns": "all", "max_tokens": 160}}}},
    )
    [mat] = result.asset_materializations_for_node("reasoning_samples")
    assert mat.metadata["captured_this_run"].value == len(wanted) - before.num_rows
    assert current_version(storage_root.path("reasoning_samples", PARTITION)) == folder.name
    # Every shard row, not just the latest view: each turn of each conversation has exactly one ok row.
    every_row = pa.concat_tables(pq.read_table(p, columns=["prompt_id", "turn", "status"]) for p in shard_paths(folder))
    assert (
        Counter(
            (pid, turn)
            for pid, turn, status in zip(*(every_row[c].to_pylist() for c in every_row.column_names))
            if status == "ok"
        )
        == wanted
    )
