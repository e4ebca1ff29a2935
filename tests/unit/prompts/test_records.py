"""Row rules: both chat shapes, normalization, ids, references, splits, and every skip reason."""

from __future__ import annotations

import re

import pytest

from eagle_assets.prompts.records import SKIP_REASONS, Prompt, Skip, classify, prompt_id, to_prompt
from eagle_assets.prompts.splits import SplitRule, group_id, split_for
from eagle_assets.sources import RawRecord, SkippedRow


def record(data, row="data.jsonl:1"):
    return RawRecord(row, data)


def openai(*turns):
    return {"messages": [{"role": r, "content": c} for r, c in turns]}


def test_openai_shape_splits_prompt_and_reference():
    p = to_prompt("demo", record({**openai(("user", "What is 2 + 2?"), ("assistant", "4")), "id": 7}))
    assert p.messages == [{"role": "user", "content": "What is 2 + 2?"}]
    assert p.reference == "4"
    assert p.source_id == "7"
    assert re.fullmatch(r"[0-9a-f]{16}", p.prompt_id)
    assert p.metadata["row"] == "data.jsonl:1"


def test_sharegpt_shape_maps_speakers_and_matches_openai_id():
    sharegpt = {
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello!"},
        ]
    }
    a = to_prompt("src", record(sharegpt))
    b = to_prompt("src", record(openai(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"))))
    assert [m["role"] for m in a.messages] == ["system", "user"]
    assert a.reference == "Hello!"
    assert a.prompt_id == b.prompt_id


def test_multi_turn_keeps_history_up_to_last_user_turn():
    p = to_prompt(
        "s",
        record(
            openai(("user", "I have eggs."), ("assistant", "Nice."), ("user", "Recipe?"), ("assistant", "Omelette."))
        ),
    )
    assert [m["content"] for m in p.messages] == ["I have eggs.", "Nice.", "Recipe?"]
    assert p.reference == "Omelette."


def test_no_reference_when_conversation_ends_with_user():
    p = to_prompt("s", record(openai(("user", "Hello?"))))
    assert p.reference is None
    assert p.source_id == "data.jsonl:1"  # no id column: the row locates it


def test_id_is_stable_under_whitespace_newlines_and_unicode_form_but_not_source():
    base = to_prompt("s", record(openai(("user", "Caf\u00e9\nmenu"))))
    variant = to_prompt("s", record(openai(("user", "  Cafe\u0301\r\nmenu \n"))))
    assert variant.prompt_id == base.prompt_id
    assert variant.messages == base.messages
    assert to_prompt("other", record(openai(("user", "Caf\u00e9\nmenu")))).prompt_id != base.prompt_id
    assert prompt_id("s", base.messages) == base.prompt_id


def test_text_content_parts_are_joined():
    data = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]
    }
    assert to_prompt("s", record(data)).messages[0]["content"] == "Hello"


@pytest.mark.parametrize(
    "data, reason",
    [
        ({"text": "hello"}, "no_messages"),
        ({"messages": ["hello"]}, "bad_turn"),
        ({"messages": [{"role": "user"}]}, "bad_turn"),
        (openai(("user", "hi"), ("robot", "beep")), "unknown_role"),
        ({"messages": [{"role": None, "content": "hi"}]}, "unknown_role"),
        (openai(("user", "hi"), ("system", "late system prompt")), "misplaced_system"),
        (openai(("system", "You are nice."), ("assistant", "Hi!")), "no_user_turn"),
        ({"messages": []}, "no_user_turn"),
        (openai(("user", "   ")), "empty_content"),
        (openai(("user", "hi"), ("assistant", "")), "empty_content"),
        ({"messages": [{"role": "user", "content": 42}]}, "non_string_content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}, "non_string_content"),
        ({"messages": [{"role": "user", "content": b"caf\xe9"}]}, "not_utf8"),
        ({"messages": [{"role": "user", "content": "bad \udce9 byte"}]}, "not_utf8"),
    ],
)
def test_bad_rows_are_skipped_with_a_named_reason(data, reason):
    result = classify("mysource", record(data, row="file.jsonl:17"))
    assert isinstance(result, Skip)
    assert result.reason == reason
    assert "'mysource'" in result.message and "file.jsonl:17" in result.message and reason in result.message


def test_utf8_bytes_are_accepted():
    result = classify("s", record({"messages": [{"role": "user", "content": "café".encode()}]}))
    assert isinstance(result, Prompt) and result.messages[0]["content"] == "café"


def test_rows_a_source_could_not_read_keep_their_kind():
    result = classify("s", SkippedRow("f.jsonl:3", "not valid JSON", "unreadable"))
    assert result == Skip("s", "f.jsonl:3", "unreadable", "not valid JSON")
    assert set(SKIP_REASONS) >= {"unreadable", "not_utf8"}


def test_split_is_deterministic_and_follows_the_fractions():
    groups = [group_id(f"question {i}") for i in range(4000)]
    splits = [split_for(g, 0.1, 0.1) for g in groups]
    assert splits == [split_for(g, 0.1, 0.1) for g in groups]
    assert 0.08 < splits.count("heldout") / len(groups) < 0.12
    assert 0.08 < splits.count("validation") / len(groups) < 0.12
    assert {split_for(g, 0.0, 0.0) for g in groups} == {"train"}
    # Raising one fraction only moves prompts between that split and train, never across the others.
    more_heldout = [split_for(g, 0.1, 0.3) for g in groups]
    assert all(after == "heldout" for before, after in zip(splits, more_heldout) if before == "heldout")
    assert [s == "validation" for s in splits] == [s == "validation" for s in more_heldout]
    with pytest.raises(ValueError, match="leaves no train split"):
        split_for(groups[0], 0.5, 0.5)


def test_the_same_problem_worded_two_ways_never_crosses_the_split():
    """Rows naming one problem (the demo's operator and operands) share a group, hence a split, for
    every fraction; without a `group` key, wordings that differ only in case, spacing and punctuation do."""
    wordings = ["What is 12 + 34?", "Compute 12 + 34.", "Please work out 12 + 34.", "Solve 12 + 34."]
    for fractions in [(0.1, 0.1), (0.0, 0.5), (0.3, 0.3), (0.45, 0.45)]:
        rule = SplitRule(*fractions)
        given = [
            to_prompt("demo", record({**openai(("user", w)), "group": "arithmetic:12+34"}), rule) for w in wordings
        ]
        assert len({p.prompt_id for p in given}) == len(wordings)  # four distinct prompts ...
        assert len({p.group_id for p in given}) == 1 and len({p.split for p in given}) == 1  # ... one problem
        plain = [
            to_prompt("s", record(openai(("user", w))), rule)
            for w in ["What is 12 + 34?", "what  is 12+34", "WHAT IS 12 + 34 ?!"]
        ]
        assert len({p.prompt_id for p in plain}) == 3 and len({p.group_id for p in plain}) == 1
        assert len({p.split for p in plain}) == 1
    # Another problem is another group; a system prompt alone does not make one.
    other = to_prompt("s", record(openai(("user", "What is 12 + 35?"))))
    with_system = to_prompt("s", record(openai(("system", "Be brief."), ("user", "What is 12 + 34?"))))
    assert other.group_id != plain[0].group_id and with_system.group_id == plain[0].group_id


def test_the_bundled_demo_rows_keep_each_problem_in_one_split():
    from eagle_assets.plugin_manager import dataset_source
    from eagle_assets.prompts.collection import collect

    found = collect(dataset_source("demo"))
    by_group: dict[str, set[str]] = {}
    for p in found.prompts:
        by_group.setdefault(p.group_id, set()).add(p.split)
    reworded = [g for g in by_group if sum(p.group_id == g for p in found.prompts) > 1]
    assert len(reworded) > 10  # the set does word some problems twice ...
    assert all(len(splits) == 1 for splits in by_group.values())  # ... and never across the line


def test_an_evaluation_only_source_puts_every_row_in_heldout():
    rule = SplitRule(0.1, 0.1, evaluation_only=True)
    assert {to_prompt("s", record(openai(("user", f"q {i}"))), rule).split for i in range(50)} == {"heldout"}


@pytest.mark.parametrize("group", [["a"], {"a": 1}, "  ", True])
def test_a_malformed_group_key_is_skipped_with_its_reason(group):
    result = classify("s", record({**openai(("user", "hi")), "group": group}))
    assert isinstance(result, Skip) and result.reason == "bad_group" and "`group`" in result.detail


def test_metadata_is_json_and_kept():
    p = to_prompt("s", record({**openai(("user", "hi")), "metadata": {"task": "chat", "n": 3}}))
    row = p.as_row()
    assert row["metadata"] == '{"n": 3, "row": "data.jsonl:1", "task": "chat"}'
