"""token_sequences on the session's real vLLM server's tokens: the local template reproduces its prompts
exactly, through to hidden_states."""

from __future__ import annotations

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import index_file, samples_folder, sequences_file
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import Verifier
from eagle_assets.token_sequences import asset as family
from tests.helpers.upstream import PARTITION


def sequences(storage_root):
    return pq.read_table(sequences_file(storage_root.root, PARTITION))


def test_real_server_tokens_through_to_hidden_states(storage_root, tiny_verifier, vllm_server_urls):
    """The real chain on the session's vLLM server: prompts -> reasoning_samples -> token_sequences (+ drift
    check) -> hidden_states, in one run. The local template reproduces the server's prompts exactly."""
    from eagle_assets.hidden_states import asset as hidden_states
    from eagle_assets.hidden_states.files import load_sample
    from eagle_assets.prompts import asset as prompts
    from eagle_assets.reasoning_samples import asset as reasoning_samples
    from eagle_assets.reasoning_samples.store import load_samples
    from eagle_assets.resources import VLLMServer

    parts = source_partitions()
    built = family.build(parts)
    result = dg.materialize(
        prompts.build(parts)["assets"]
        + reasoning_samples.build(parts)["assets"]
        + built["assets"]
        + built["checks"]
        + hidden_states.build(parts)["assets"],
        partition_key=PARTITION,
        resources={
            "storage": storage_root,
            "verifier": Verifier(model_path=str(tiny_verifier), device="cpu"),
            "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls),
        },
        run_config={"ops": {"prompts": {"config": {"limit": 6}}, "reasoning_samples": {"config": {"max_tokens": 200}}}},
        raise_on_error=False,
    )
    assert result.success
    samples = {s["prompt_id"]: s for s in load_samples(samples_folder(storage_root.root, PARTITION)).to_pylist()}
    table = sequences(storage_root)
    assert table.num_rows == sum(s["status"] == "ok" for s in samples.values()) > 0
    for row in table.to_pylist():
        sample = samples[row["prompt_id"]]
        assert row["origin"] == "server_tokens"
        prompt_len = row["loss_mask"].count(0)
        assert row["input_ids"][:prompt_len] == sample["prompt_token_ids"]
        assert row["input_ids"][prompt_len:] == sample["token_ids"] and all(row["loss_mask"][prompt_len:])
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "template_drift"]
    assert check.passed and check.metadata["drift_prompt_mismatch_rate"].value == 0.0
    index = pq.read_table(index_file(storage_root.root, PARTITION)).to_pylist()
    by_id = {r["prompt_id"]: r["input_ids"] for r in table.to_pylist()}
    for entry in index:
        stored = load_sample(storage_root.path("hidden_states", PARTITION) / entry["file"])
        assert stored["token_ids"].tolist() == by_id[entry["prompt_id"]]
