"""Reasoning samples → training rows (``input_ids`` + ``loss_mask``); the template drift check is :mod:`.drift`.

A row is the prompt followed by the verifier's completion; the loss mask is 0 on the prompt and 1 on
the completion (thinking, answer and the stop token), since the draft must predict what the
verifier *writes*. The server's exact token ids are used when the sample has them; otherwise the
conversation is rendered through the verifier backend's chat template.

With ``turns: all`` every regenerated turn is a sample of its own, so every turn becomes a row of its own
(``turn`` = its index): the exact context the verifier was asked with (unsupervised) and its answer
(supervised). One row per turn, not one per conversation, because a template that drops earlier turns'
thinking (Qwen3's) makes turn ``k``'s context differ from the tokens turn ``k-1`` generated.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle_assets.core.layout import LAST_TURN_ONLY
from eagle_assets.core.tables import list_rows
from eagle_assets.reasoning_samples.turns import Answer, turn_context

# What hidden states and training read (splits come from the current prompts table, not from here).
VERSIONED_COLUMNS = ("prompt_id", "turn", "input_ids", "loss_mask")
SEQUENCES_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("turn", pa.int32()),  # the sample's turn (reasoning_samples' `turns`); LAST_TURN_ONLY for `last`
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("seq_len", pa.int32()),
        ("origin", pa.string()),  # "server_tokens" | "rendered"
    ]
)

# (messages, reasoning, content) -> (prompt ids, completion ids)
# (messages, reasoning, content, the request's chat_template_kwargs) -> (prompt ids, completion ids)
Renderer = Callable[[list[dict], "str | None", "str | None", "dict | None"], tuple[list[int], list[int]]]


def template_kwargs(samples: pa.Table, i: int) -> dict:
    """The ``chat_template_kwargs`` row ``i`` was requested with (its ``sampling`` JSON; thinking off, ...):
    the server rendered its prompt with them, so a local render must too."""
    sampling = samples["sampling"][i].as_py() if "sampling" in samples.column_names else None
    return json.loads(sampling).get("chat_template_kwargs") or {} if sampling else {}


@dataclass(frozen=True)
class Policy:
    max_length: int
    overlength: str  # "truncate" | "drop"
    splits: tuple[str, ...]
    # Quality class -> "keep" | "drop" | "cut" (cut: the completion ends where its loop starts); a class
    # not named here, and samples without classes, are kept.
    quality: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Built:
    """Rows as flat token arrays (one concatenation at the end instead of per-row Python lists)."""

    prompt_ids: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    prompt_lengths: list[int] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    cut_to_max_length: int = 0
    cut_at_loop: int = 0

    def add(self, prompt_id: str, turn: int, prompt, completion, origin: str) -> None:
        self.prompt_ids.append(prompt_id)
        self.turns.append(turn)
        self.origins.append(origin)
        self.tokens.append(np.concatenate([np.asarray(prompt, np.int32), np.asarray(completion, np.int32)]))
        self.prompt_lengths.append(len(prompt))

    @property
    def supervised_tokens(self) -> int:
        return sum(len(t) for t in self.tokens) - sum(self.prompt_lengths)

    def table(self) -> pa.Table:
        lengths = np.array([len(t) for t in self.tokens], np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)
        values = np.concatenate(self.tokens) if self.tokens else np.zeros(0, np.int32)
        mask = np.ones(len(values), np.int8)
        for start, prompt_len in zip(offsets[:-1], self.prompt_lengths):
            mask[start : start + prompt_len] = 0
        arrow_offsets = pa.array(offsets, pa.int32())
        return pa.table(
            {
                "prompt_id": pa.array(self.prompt_ids, pa.string()),
                "turn": pa.array(self.turns, pa.int32()),
                "input_ids": pa.ListArray.from_arrays(arrow_offsets, pa.array(values, pa.int32())),
                "loss_mask": pa.ListArray.from_arrays(arrow_offsets, pa.array(mask, pa.int8())),
                "seq_len": pa.array(lengths, pa.int32()),
                "origin": pa.array(self.origins, pa.string()),
            },
            schema=SEQUENCES_SCHEMA,
        )


def row_keys(table: pa.Table) -> pa.Array:
    """``prompt_id/turn`` per row: what names one training row (with ``turns: all`` a conversation has one
    row per turn, so the prompt id alone does not)."""
    return pc.binary_join_element_wise(table["prompt_id"], pc.cast(table["turn"], pa.string()), "/")


def column_or_nulls(samples: pa.Table, name: str) -> list:
    """``samples``' column ``name`` as a list; all None where the table has no such column."""
    return samples[name].to_pylist() if name in samples.column_names else [None] * samples.num_rows


def _turns(samples: pa.Table) -> list[int]:
    return [LAST_TURN_ONLY if t is None else t for t in column_or_nulls(samples, "turn")]


def sample_contexts(samples: pa.Table, messages: dict[str, list[dict]]) -> Callable[[int], list[dict] | None]:
    """``context(i)``: the messages sample ``i`` was asked with, rebuilt from the prompts table and (for a
    turn of ``turns: all``) the stored answers before it; None when the prompt or an earlier answer is gone."""
    ids, turns = column_or_nulls(samples, "prompt_id"), _turns(samples)
    row_of = {(pid, turn): i for i, (pid, turn) in enumerate(zip(ids, turns))}

    def context(i: int) -> list[dict] | None:
        conversation, turn = messages.get(ids[i]), turns[i]
        if conversation is None or turn == LAST_TURN_ONLY:
            return conversation
        earlier = [row_of.get((ids[i], k)) for k in range(turn)]
        if None in earlier:
            return None
        answers = [Answer(samples["content"][j].as_py(), samples["reasoning"][j].as_py()) for j in earlier]
        return turn_context(conversation, turn, answers)

    return context


def build_rows(
    samples: pa.Table, messages: dict[str, list[dict]], splits: dict[str, str], render: Renderer, policy: Policy
) -> Built:
    """One row per usable sample; every other sample counted under the reason it was skipped.

    ``policy.quality`` applies per quality class (the ``quality``/``loop_start`` columns of
    :func:`~eagle_assets.reasoning_samples.store.load_classified`).

    ``splits`` (prompt id -> split) and ``messages`` are the *current* prompts table's: a sample whose
    prompt has left the table, or whose prompt is now in a split the policy leaves out, makes no row,
    whatever split it was captured under.
    """
    out = Built()
    context = sample_contexts(samples, messages)
    ids, turns, statuses = column_or_nulls(samples, "prompt_id"), _turns(samples), column_or_nulls(samples, "status")
    classes, loop_starts = column_or_nulls(samples, "quality"), column_or_nulls(samples, "loop_start")
    prompts, completions = list_rows(samples["prompt_token_ids"]), list_rows(samples["token_ids"])
    for i, prompt_id in enumerate(ids):
        if statuses[i] != "ok":
            out.skipped["error"] += 1
            continue
        if prompt_id not in splits:
            out.skipped["not_in_prompts"] += 1
            continue
        if splits[prompt_id] not in policy.splits:
            out.skipped["other_split"] += 1
            continue
        action = policy.quality.get(classes[i], "keep")
        if action == "drop":
            out.skipped[f"quality_{classes[i]}"] += 1
            continue
        prompt_ids, completion_ids, origin = prompts[i], completions[i], "server_tokens"
        if action == "cut" and loop_starts[i] is not None and completion_ids is not None:
            if not loop_starts[i]:  # all of it is the loop: nothing is left to keep
                out.skipped[f"quality_{classes[i]}"] += 1
                continue
            completion_ids = completion_ids[: loop_starts[i]]  # the loop was found on these very ids
            out.cut_at_loop += 1
        if prompt_ids is None or completion_ids is None or not len(prompt_ids) or not len(completion_ids):
            # Texts are read per rendered row only: the common (server-token) path never builds them.
            asked_with = context(i)
            if asked_with is None:
                out.skipped["context_unknown"] += 1
                continue
            prompt_ids, completion_ids = render(
                asked_with, samples["reasoning"][i].as_py(), samples["content"][i].as_py(), template_kwargs(samples, i)
            )
            origin = "rendered"
        if not len(completion_ids):
            out.skipped["empty_completion"] += 1
            continue
        if len(prompt_ids) + len(completion_ids) > policy.max_length:
            if policy.overlength == "drop" or len(prompt_ids) >= policy.max_length:
                out.skipped["over_max_length"] += 1
                continue
            completion_ids = completion_ids[: policy.max_length - len(prompt_ids)]
            out.cut_to_max_length += 1
        out.add(prompt_id, turns[i], prompt_ids, completion_ids, origin)
    return out


def template_hash(tokenizer) -> str:
    return hashlib.sha256((tokenizer.chat_template or "").encode()).hexdigest()[:16]
