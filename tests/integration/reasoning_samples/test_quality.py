"""Quality classes of real samples of the tiny verifier, captured from the session's vLLM server: cut by
a small max_tokens, looping, trivially short; and the token_sequences policy applied to them."""

from __future__ import annotations

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import samples_folder, sequences_file
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.reasoning_samples.quality import (
    QualityRules,
)
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.store import load_classified, load_samples, write_quality
from eagle_assets.resources import Verifier, VLLMServer
from eagle_assets.token_sequences import asset as token_sequences
from eagle_assets.token_sequences.build import Policy, build_rows
from tests.helpers.upstream import PARTITION


def no_render(*_):
    raise AssertionError("server tokens are used as they are")


def test_real_samples_cut_by_max_tokens_are_classified_and_dropped_by_policy(
    storage_root, tiny_verifier, vllm_server_urls
):
    """The tiny verifier thinks for ~60-90 tokens: max_tokens 64 cuts most samples inside their thinking."""
    from transformers import AutoTokenizer

    parts = source_partitions()
    sequences = token_sequences.build(parts)["assets"]
    resources = {
        "storage": storage_root,
        "verifier": Verifier(model_path=str(tiny_verifier)),
        "vllm_server": VLLMServer(mode="external", base_urls=vllm_server_urls),
    }
    drop = {"unfinished_thinking": "drop", "truncated": "drop"}
    result = dg.materialize(
        prompts.build(parts)["assets"] + reasoning_samples.build(parts)["assets"] + sequences,
        partition_key=PARTITION,
        resources=resources,
        raise_on_error=False,
        run_config={
            "ops": {
                "prompts": {"config": {"limit": 10}},
                "reasoning_samples": {"config": {"max_tokens": 64, "max_non_ok_share": 0.0}},
                "token_sequences": {"config": {"quality_policy": drop}},
            }
        },
    )
    assert result.success
    end = AutoTokenizer.from_pretrained(tiny_verifier).convert_tokens_to_ids("</think>")
    samples, rules = load_classified(samples_folder(storage_root.root, PARTITION))
    assert rules == reasoning_samples.ReasoningSamplesConfig(max_tokens=64).quality_rules()  # the run's rules, stored
    for sample in samples.to_pylist():
        closed = end in sample["token_ids"]
        assert sample["unfinished_thinking"] == (not closed)
        if sample["finish_reason"] == "length":
            assert sample["quality"] == ("truncated" if closed else "unfinished_thinking")
        else:
            assert closed and sample["quality"] in ("ok", "trivial_reasoning", "empty_answer")
    cut = {s["prompt_id"] for s in samples.to_pylist() if s["quality"] in drop}
    assert cut, "max_tokens 64 cut no sample: the tiny verifier's thinking got shorter"

    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "quality_non_ok_share_below_limit"]
    assert not check.passed and "max_tokens" in check.metadata["what_to_change"].value
    assert sum(check.metadata[name].value for name in drop if name in check.metadata) == len(cut)
    [mat] = result.asset_materializations_for_node("reasoning_samples")
    assert mat.metadata["quality/non_ok_share"].value == len(cut) / 10 and "quality_examples" in mat.metadata

    def rows_and_version(run):
        [seq] = run.asset_materializations_for_node("token_sequences")
        table = pq.read_table(sequences_file(storage_root.root, PARTITION))
        return set(table["prompt_id"].to_pylist()), seq.tags["dagster/data_version"]

    dropped_rows, dropped_version = rows_and_version(result)
    assert dropped_rows == set(samples["prompt_id"].to_pylist()) - cut
    # The policy is recorded, and changing it re-derives the rows.
    report = (sequences_file(storage_root.root, PARTITION).parent / "tokenization.json").read_text()
    assert '"unfinished_thinking": "drop"' in report
    kept = dg.materialize(sequences, partition_key=PARTITION, resources=resources)
    kept_rows, kept_version = rows_and_version(kept)
    assert kept_rows == set(samples["prompt_id"].to_pylist()) and kept_version != dropped_version


def test_real_samples_the_verifier_loops_on_or_answers_trivially_are_detected_and_the_policy_applies(
    tmp_path, tiny_verifier, vllm_server_urls
):
    """Prompts found to push the tiny verifier into each failure (greedy): a run of ones makes it repeat
    "1, " until max_tokens; a greeting gets its two-line "not an arithmetic problem" thinking, below a floor of
    20 thinking tokens; an arithmetic question thinks for 60-90 tokens and is ok."""
    from eagle_assets.reasoning_samples.capture import capture
    from eagle_assets.reasoning_samples.engine import ClientSettings
    from eagle_assets.reasoning_samples.requests import PromptRequest

    prompts_by_kind = {"loop": "1 " * 40, "trivial": "hello", "ok": "What is 609 plus 558?"}
    requests = [
        PromptRequest(kind, [{"role": "user", "content": text.strip()}], "train")
        for kind, text in prompts_by_kind.items()
    ]
    folder = tmp_path / "samples"
    capture(
        vllm_server_urls,
        requests,
        folder,
        Sampling(temperature=0.0, top_p=1.0, max_tokens=400),
        ClientSettings(concurrency=3),
        lambda _line: None,
    )
    rules = QualityRules(min_thinking_tokens=20, loop_ngram=16, loop_min_repeats=4, loop_max_share=0.3)
    write_quality(folder, load_samples(folder), rules)
    samples, _ = load_classified(folder)
    by_kind = {row["prompt_id"]: row for row in samples.to_pylist()}
    loop, trivial, ok = by_kind["loop"], by_kind["trivial"], by_kind["ok"]
    assert loop["quality"] == "repetition_loop" and 0 < loop["loop_start"] < len(loop["token_ids"]), loop
    assert trivial["quality"] == "trivial_reasoning" and trivial["thinking_tokens"] < 20, trivial
    assert ok["quality"] == "ok" and ok["thinking_tokens"] >= 20, ok

    policy = Policy(1000, "truncate", ("train",), {"repetition_loop": "cut", "trivial_reasoning": "drop"})
    built = build_rows(samples, {}, dict.fromkeys(by_kind, "train"), no_render, policy)
    rows = {
        pid: tokens[length:].tolist()
        for pid, tokens, length in zip(built.prompt_ids, built.tokens, built.prompt_lengths)
    }
    assert set(rows) == {"loop", "ok"} and built.skipped["quality_trivial_reasoning"] == 1
    # The loop is cut where it starts: what stays is the verifier's own tokens before it.
    assert rows["loop"] == list(loop["token_ids"][: loop["loop_start"]]) and built.cut_at_loop == 1
    assert rows["ok"] == list(ok["token_ids"])
