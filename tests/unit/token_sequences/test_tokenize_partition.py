"""``tokenize_partition`` and ``partition_drift``, called directly (no Dagster), with a scripted chat template:
the rows, masks and counts they produce, the report beside them, the versions they publish, the samples they
refuse, and the drift they measure."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from eagle_assets.core.layout import LAST_TURN_ONLY, current_version, sequences_file
from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.splits import MissingPrompts
from eagle_assets.prompts.write import write_prompts
from eagle_assets.reasoning_samples.capture_partition import CaptureSettings
from eagle_assets.reasoning_samples.recipe import tokenizer_hash
from eagle_assets.reasoning_samples.sample_sets import open_sample_set
from eagle_assets.reasoning_samples.store import ShardWriter
from eagle_assets.token_sequences.build import SEQUENCES_SCHEMA, Policy, template_hash
from eagle_assets.token_sequences.tokenize_partition import (
    LocalTemplate,
    MissingSamples,
    WrongTokenizer,
    partition_drift,
    tokenize_partition,
)
from tests.helpers.upstream import model_folder, served_from

LOG = logging.getLogger("tests.token_sequences.tokenize_partition")
ALL_SPLITS = ("train", "validation", "heldout")
TOKENIZER = SimpleNamespace(chat_template="{{ scripted }}")


def render(messages, reasoning, content, template_kwargs=None, opening=1):
    """A chat template in miniature: the prompt is one id per turn (its length), the completion one per char."""
    prompt = [opening, *(len(m["content"]) for m in messages), 2]
    completion = [3 + ord(c) % 100 for c in f"{reasoning}|{content}"] + [0]
    return prompt, completion


def changed_render(messages, reasoning, content, template_kwargs=None):
    return render(messages, reasoning, content, template_kwargs, opening=9)


def texts(i: int) -> tuple[str, str]:
    """Sample ``i``'s reasoning and answer (longer for later samples: rows of different lengths)."""
    return f"think {'.' * 3 * i}", f"answer {i}"


def template(renderer=render, tokenizer: str = "scripted-tokenizer") -> LocalTemplate:
    return LocalTemplate(renderer, TOKENIZER, "/models/scripted", "scripted@1", tokenizer)


@pytest.fixture
def stored(tmp_path):
    """A prompts table of 8 questions and their samples, in the current sample set of a served model folder:
    5 with server tokens (one truncated), 2 without (rendered here), 1 error."""
    source = tmp_path / "questions.jsonl"
    source.write_text(
        "\n".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) for i in range(8))
    )
    prompts = write_prompts(dataset_source("jsonl"), tmp_path / "prompts" / "jsonl", LOG, location=str(source))
    served = served_from(model_folder(tmp_path / "served-model"))
    recipe = CaptureSettings().recipe(served)
    samples_folder = open_sample_set(tmp_path / "reasoning_samples" / "jsonl", recipe, "refuse").folder
    rows = prompts.table.to_pylist()
    with ShardWriter(samples_folder, rows_per_shard=3, recipe=recipe.recipe_id) as writer:
        for i, prompt in enumerate(rows):
            reasoning, content = texts(i)
            prompt_ids, completion_ids = render(prompt["messages"], reasoning, content)
            row = {
                "prompt_id": prompt["prompt_id"],
                "turn": LAST_TURN_ONLY,
                "split": prompt["split"],
                "status": "ok",
                "reasoning": reasoning,
                "content": content,
                "finish_reason": "stop",
                "prompt_token_ids": prompt_ids,
                "token_ids": completion_ids,
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "truncated": False,
                "unfinished_thinking": False,
                "sampling": "{}",
                "finished_at": float(i),
            }
            if i == 4:
                row.update(finish_reason="length", truncated=True)
            if i in (5, 6):
                row.update(prompt_token_ids=None, token_ids=None)
            if i == 7:
                row.update(status="error", error="HTTP 500", prompt_token_ids=None, token_ids=None)
            writer.add(row)
    lengths = {r["prompt_id"]: sum(map(len, render(r["messages"], *texts(i)))) for i, r in enumerate(rows)}
    return SimpleNamespace(
        root=tmp_path,
        prompts=prompts.path,
        samples=samples_folder,
        recipe=recipe,
        served=served,
        out=tmp_path / "token_sequences" / "jsonl",
        rows=rows,
        lengths=lengths,
    )


def tokenize(stored, policy=Policy(16384, "truncate", ALL_SPLITS), renderer=render, tokenizer=None, **kwargs):
    """tokenize_partition with the scripted template, its tokenizer the samples' unless ``tokenizer`` says."""
    loaded = template(renderer, tokenizer or stored.served.tokenizer_hash)
    return tokenize_partition(
        stored.samples, stored.prompts, stored.out, "jsonl", policy, lambda: loaded, LOG, **kwargs
    )


def test_rows_mask_exactly_the_completion_and_are_counted(stored):
    result = tokenize(stored, recorded_policy={"max_length": 16384})
    published = stored.out / "versions" / result.data_version
    assert result.path == published / "sequences.parquet" == sequences_file(stored.root, "jsonl")
    assert current_version(stored.out) == result.data_version
    table = pq.read_table(result.path)
    assert table.schema == SEQUENCES_SCHEMA
    assert table.equals(result.table) and table.num_rows == 7  # the error row has no tokens
    by_id = {r["prompt_id"]: r for r in stored.rows}
    for row in table.to_pylist():
        i = stored.rows.index(by_id[row["prompt_id"]])
        prompt, completion = render(by_id[row["prompt_id"]]["messages"], *texts(i))
        assert row["input_ids"] == prompt + completion and row["seq_len"] == len(prompt) + len(completion)
        assert row["loss_mask"] == [0] * len(prompt) + [1] * len(completion)
        assert row["origin"] == ("rendered" if i in (5, 6) else "server_tokens") and row["turn"] == LAST_TURN_ONLY
    counts = result.counts
    assert (counts["samples"], counts["server_tokens_rows"], counts["rendered_rows"]) == (8, 5, 2)
    assert counts["skipped_error"] == 1 and counts["samples_truncated"] == 1 and counts["samples_error"] == 1
    assert counts["tokens"] == sum(table["seq_len"].to_pylist())
    assert counts["max_seq_len"] == max(stored.lengths[r["prompt_id"]] for r in stored.rows[:7])
    assert counts["supervised_tokens"] == sum(row["loss_mask"].count(1) for row in table.to_pylist())
    assert counts["drift_checked"] == 5 and counts["drift_prompt_mismatch_rate"] == 0.0
    assert counts["template_hash"] == template_hash(TOKENIZER)
    assert counts["samples_recipe"] == stored.recipe.recipe_id == result.recipe.recipe_id
    report = json.loads((published / "tokenization.json").read_text())
    assert report["policy"] == {"max_length": 16384} and report["verifier"] == "/models/scripted"
    assert report["verifier_identity"] == "scripted@1" and report["content_hash"] == result.data_version
    assert report["samples_recipe"] == stored.recipe.recipe_id
    assert report["tokenizer_hash"] == counts["tokenizer_hash"] == tokenizer_hash(stored.root / "served-model")
    assert report["drift"]["drift_checked"] == 5 and report["quality_rules"]["loop_ngram"] == 16
    assert tokenize(stored).data_version == result.data_version  # same samples, same rows, same version


def test_policies_drop_a_class_and_cut_overlong_completions(stored):
    limit = sorted(stored.lengths.values())[3]
    policy = Policy(limit, "truncate", ALL_SPLITS, {"truncated": "drop"})
    result = tokenize(stored, policy)
    table = result.table
    assert result.counts["skipped_quality_truncated"] == 1 and table.num_rows == 6
    assert max(table["seq_len"].to_pylist()) <= limit
    cut = [r for r in table.to_pylist() if stored.lengths[r["prompt_id"]] > limit]
    assert 0 < result.counts["cut_to_max_length"] == len(cut) < table.num_rows
    dropped = tokenize(stored, Policy(limit, "drop", ALL_SPLITS))
    overlong = [r for r in stored.rows[:7] if stored.lengths[r["prompt_id"]] > limit]  # the error row makes none
    assert dropped.counts["skipped_over_max_length"] == len(overlong) > 0


def test_only_the_chosen_splits_make_rows(stored):
    result = tokenize(stored, Policy(16384, "truncate", ("train",)))
    train = {r["prompt_id"] for r in stored.rows[:7] if r["split"] == "train"}
    assert set(result.table["prompt_id"].to_pylist()) == train
    assert result.counts["skipped_other_split"] == 7 - len(train)


def test_a_changed_template_shows_as_prompt_drift(stored, caplog):
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        result = tokenize(stored, renderer=changed_render)
    assert result.drift.checked == 5 and result.drift.prompt_mismatch_rate == 1.0
    assert result.counts["drift_prompt_mismatch_rate"] == 1.0
    assert [r.getMessage().startswith("template drift: ") for r in caplog.records] == [True] * 5
    assert partition_drift(stored.samples, stored.prompts, changed_render).prompt_mismatches == 5
    assert partition_drift(stored.samples, stored.prompts, render).prompt_mismatches == 0


def test_missing_prompts_fail_before_the_template_is_loaded(stored):
    stored.prompts.unlink()
    loaded = []
    with pytest.raises(MissingPrompts, match="materialize prompts for partition 'jsonl' first"):
        tokenize_partition(
            stored.samples,
            stored.prompts,
            stored.out,
            "jsonl",
            Policy(16, "drop", ALL_SPLITS),
            lambda: loaded.append(1) or template(),
            LOG,
        )
    assert not loaded and not stored.out.exists()


def test_samples_of_another_tokenizer_are_refused_naming_both_before_anything_is_written(stored):
    with pytest.raises(WrongTokenizer) as refused:
        tokenize(stored, tokenizer="0123456789abcdef")
    message = str(refused.value)
    served = stored.served
    assert f"with tokenizer {served.tokenizer_hash} (of {served.folder})" in message
    assert "loads /models/scripted with tokenizer 0123456789abcdef" in message
    assert f"Point verifier.model_path at {served.folder}" in message and "re-materialize reasoning_samples" in message
    assert stored.recipe.recipe_id in message and not stored.out.exists()


def test_a_partition_without_samples_fails_naming_the_asset_before_the_template_is_loaded(stored):
    loaded = []
    with pytest.raises(MissingSamples, match="materialize the `reasoning_samples` asset"):
        tokenize_partition(
            stored.root / "reasoning_samples" / "other" / "recipes" / "unpublished",
            stored.prompts,
            stored.out,
            "other",
            Policy(16, "drop", ALL_SPLITS),
            lambda: loaded.append(1) or template(),
            LOG,
        )
    assert not loaded and not stored.out.exists()


def test_each_materialization_publishes_a_version_and_never_rewrites_an_earlier_one(stored):
    first = tokenize(stored, recorded_policy={"max_length": 16384})
    kept = {p.name: p.read_bytes() for p in first.path.parent.iterdir()}
    shorter = tokenize(stored, Policy(sorted(stored.lengths.values())[3], "drop", ALL_SPLITS))
    assert shorter.data_version != first.data_version and shorter.path.parent != first.path.parent
    assert (
        current_version(stored.out)
        == shorter.data_version
        == json.loads((shorter.path.parent / "tokenization.json").read_text())["content_hash"]
    )
    assert {p.name: p.read_bytes() for p in first.path.parent.iterdir()} == kept
    # The first rows again: their version is current again, as it was.
    again = tokenize(stored, recorded_policy={"max_length": 16384})
    assert again.path == first.path and current_version(stored.out) == first.data_version
    assert {p.name: p.read_bytes() for p in first.path.parent.iterdir()} == kept
