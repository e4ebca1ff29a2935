"""The ``token_sequences`` asset and its ``template_drift`` check, materialized for real on stored samples: the
rows, the policies, and what stops samples of another vocabulary before hidden_states."""

from __future__ import annotations

import shutil

import dagster as dg
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from eagle_assets.core.layout import sequences_file
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.reasoning_samples.recipe import tokenizer_hash
from eagle_assets.resources import Verifier
from eagle_assets.token_sequences import asset as family
from eagle_assets.token_sequences.build import SEQUENCES_SCHEMA
from tests.helpers.upstream import PARTITION, demo_prompts, sample_row, write_samples


@pytest.fixture
def upstream(storage_root, quick_tiny_verifier):
    """Real prompts (the demo partition, 12 rows) and reasoning-sample shards written by the real store:
    8 with server tokens, 2 without (rendered), 1 error, 1 truncated."""
    prompts = demo_prompts(storage_root, 12)
    tokenizer = AutoTokenizer.from_pretrained(quick_tiny_verifier)
    rows = [sample_row(p, tokenizer) for p in prompts[:8]]
    rows += [sample_row(p, tokenizer, prompt_token_ids=None, token_ids=None) for p in prompts[8:10]]
    rows.append(sample_row(prompts[10], tokenizer, status="error", error="HTTP 500", token_ids=None))
    rows.append(sample_row(prompts[11], tokenizer, truncated=True, finish_reason="length"))
    write_samples(storage_root, rows)
    full = [sample_row(p, tokenizer) for p in prompts]
    return {
        "prompts": {p["prompt_id"]: p for p in prompts},
        "samples": {r["prompt_id"]: r for r in rows},
        "lengths": {r["prompt_id"]: len(r["prompt_token_ids"]) + len(r["token_ids"]) for r in full},
        "tokenizer": tokenizer,
    }


def materialize(storage_root, verifier, config=None, with_check=True):
    built = family.build(source_partitions())
    return dg.materialize(
        built["assets"] + (built["checks"] if with_check else []),
        partition_key=PARTITION,
        resources={"storage": storage_root, "verifier": verifier},
        run_config={"ops": {"token_sequences": {"config": config}}} if config else None,
        raise_on_error=False,
    )


def sequences(storage_root):
    return pq.read_table(sequences_file(storage_root.root, PARTITION))


def failure_message(result) -> str:
    return "\n".join(e.step_failure_data.error.message for e in result.get_step_failure_events())


def test_masks_cover_exactly_the_completion(storage_root, quick_tiny_verifier, upstream):
    result = materialize(storage_root, Verifier(model_path=str(quick_tiny_verifier)))
    assert result.success
    table = sequences(storage_root)
    assert table.schema == SEQUENCES_SCHEMA
    tokenizer = upstream["tokenizer"]
    origins = {}
    for row in table.to_pylist():
        sample = upstream["samples"][row["prompt_id"]]
        mask, ids = row["loss_mask"], row["input_ids"]
        prompt_len = mask.index(1)
        assert mask == [0] * prompt_len + [1] * (len(ids) - prompt_len) and row["seq_len"] == len(ids)
        origins[row["prompt_id"]] = row["origin"]
        if row["origin"] == "server_tokens":
            assert ids == sample["prompt_token_ids"] + sample["token_ids"]
            assert prompt_len == len(sample["prompt_token_ids"])
        # Either way the supervised part is exactly the verifier's reply, through its stop token.
        completion = tokenizer.decode(ids[prompt_len:])
        assert completion == f"{sample['reasoning']}\n</think>\n\n{sample['content']}<|im_end|>"
        assert tokenizer.decode(ids[:prompt_len]).endswith("<|im_start|>assistant\n<think>\n")
    # 8 server-token rows + 1 truncated (kept by default) + 2 rendered; the error row is skipped.
    assert sorted(origins.values()).count("server_tokens") == 9 and list(origins.values()).count("rendered") == 2
    [mat] = result.asset_materializations_for_node("token_sequences")
    assert mat.metadata["skipped_error"].value == 1
    assert mat.metadata["drift_prompt_mismatch_rate"].value == 0.0
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["drift_checked"].value == 9


def test_policies_drop_a_quality_class_and_cut_overlong_rows(storage_root, quick_tiny_verifier, upstream):
    limit = sorted(upstream["lengths"].values())[6]  # the median row: some rows are cut, some are not
    result = materialize(
        storage_root,
        Verifier(model_path=str(quick_tiny_verifier)),
        {
            "quality_policy": {"truncated": "drop"},
            "max_length": limit,
            "overlength_policy": "truncate",
            "splits": ["train", "validation", "heldout"],
        },
        with_check=False,
    )
    assert result.success
    table = sequences(storage_root)
    assert max(table["seq_len"].to_pylist()) <= limit
    assert not any(upstream["samples"][p]["truncated"] for p in table["prompt_id"].to_pylist())
    [mat] = result.asset_materializations_for_node("token_sequences")
    assert mat.metadata["skipped_quality_truncated"].value == mat.metadata["samples_truncated"].value == 1
    cut = [r for r in table.to_pylist() if upstream["lengths"][r["prompt_id"]] > limit]
    assert 0 < mat.metadata["cut_to_max_length"].value == len(cut) < table.num_rows
    for row in cut:  # the prompt stays whole and unsupervised; the completion is what gets cut
        prompt = upstream["samples"][row["prompt_id"]]["prompt_token_ids"]
        assert row["seq_len"] == limit and row["input_ids"][: len(prompt)] == prompt
        assert row["loss_mask"].count(0) == len(prompt)


def test_drift_check_catches_a_changed_template(storage_root, quick_tiny_verifier, upstream, tmp_path):
    changed = tmp_path / "changed-verifier"
    shutil.copytree(quick_tiny_verifier, changed)
    template = changed / "chat_template.jinja"
    # A one-character change in how turns open: every prompt now tokenizes differently.
    template.write_text(
        template.read_text().replace("'<|im_start|>' + message.role + '\\n'", "'<|im_start|>' + message.role + ':\\n'")
    )
    result = materialize(storage_root, Verifier(model_path=str(changed)))
    # The asset still writes its rows; the check is what flags them, and being blocking it fails the run.
    assert [e.step_key for e in result.get_step_failure_events()] == ["token_sequences_template_drift"]
    assert sequences(storage_root).num_rows == 11
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["drift_prompt_mismatch_rate"].value == 1.0
    [mat] = result.asset_materializations_for_node("token_sequences")
    assert mat.metadata["drift_prompt_mismatch_rate"].value == 1.0


def test_the_drift_check_blocks_what_depends_on_the_rows():
    [check] = family.build(source_partitions())["checks"]
    [spec] = check.check_specs
    assert spec.name == "template_drift" and spec.blocking


def test_samples_of_another_tokenizer_are_refused_naming_both(storage_root, quick_tiny_verifier, quick_tiny_kimi):
    prompts = demo_prompts(storage_root, 4)
    write_samples(storage_root, [sample_row(p, AutoTokenizer.from_pretrained(quick_tiny_kimi)) for p in prompts])
    result = materialize(storage_root, Verifier(model_path=str(quick_tiny_verifier)))
    assert not result.success
    message = failure_message(result)
    assert f"token_sequences[{PARTITION}]: the samples in " in message
    assert f"generated by {quick_tiny_kimi} with tokenizer {tokenizer_hash(quick_tiny_kimi)}" in message
    assert f"loads {quick_tiny_verifier} with tokenizer {tokenizer_hash(quick_tiny_verifier)}" in message
    assert f"Point verifier.model_path at {quick_tiny_kimi}" in message
    assert not storage_root.path("token_sequences", PARTITION).joinpath("versions").exists()  # nothing written


def test_a_mixed_vocabulary_dataset_never_reaches_hidden_states(storage_root, quick_tiny_verifier, quick_tiny_kimi):
    """A sample set whose recipe names the verifier's tokenizer but half of whose token ids are another
    vocabulary's (as a server serving another model than it says would write): token_sequences writes its
    rows, the blocking drift check fails, and hidden_states, in the same run, does not start."""
    from eagle_assets.hidden_states import asset as hidden_states

    prompts = demo_prompts(storage_root, 8)
    qwen, kimi = AutoTokenizer.from_pretrained(quick_tiny_verifier), AutoTokenizer.from_pretrained(quick_tiny_kimi)
    rows = [sample_row(p, qwen) for p in prompts[:4]]
    rows += [sample_row(p, kimi, server_model=str(quick_tiny_verifier)) for p in prompts[4:]]
    write_samples(storage_root, rows)
    parts = source_partitions()
    built, features = family.build(parts), hidden_states.build(parts)
    result = dg.materialize(
        built["assets"] + built["checks"] + features["assets"],
        partition_key=PARTITION,
        resources={"storage": storage_root, "verifier": Verifier(model_path=str(quick_tiny_verifier), device="cpu")},
        raise_on_error=False,
    )
    assert not result.success
    [mat] = result.asset_materializations_for_node("token_sequences")
    assert mat.metadata["drift_prompt_mismatch_rate"].value > 0
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert "hidden_states does not run on these rows" in check.metadata["what_to_change"].value
    assert not result.asset_materializations_for_node("hidden_states")
    # hidden_states was in the run, and never started.
    assert "hidden_states" in result.job_def.graph.node_dict
    assert "hidden_states" not in {e.step_key for e in result.all_events}
