"""Quality classes of captured samples, from token ids, the finish reason and the reasoning parser's split.

Every sample gets exactly one class. When several apply, the first in :data:`QUALITY_CLASSES` wins:

1. ``error``: no completion (the request failed); nothing else can be said.
2. ``repetition_loop``: n-grams repeated at least ``loop_min_repeats`` times cover more than
   ``loop_max_share`` of the completion. A loop usually runs on to max_tokens, so it also looks
   ``truncated``/``unfinished_thinking``; the loop is the cause, and only this class can be salvaged
   (``token_sequences``' ``cut`` keeps the completion before the loop).
3. ``unfinished_thinking``: the thinking section never closed (cut at max_tokens inside it, or the
   model stopped there): there is no answer at all.
4. ``truncated``: cut at max_tokens (finish reason ``length``) after the thinking closed: the answer
   is incomplete.
5. ``empty_answer``: finished normally, but nothing (or only whitespace) after the thinking.
6. ``trivial_reasoning``: a complete answer after a thinking section shorter than
   ``min_thinking_tokens`` (samples without a thinking section, e.g. thinking switched off, are not
   judged by this rule).
7. ``ok``: none of the above.

Everything here is pure: token ids are compared as ids (no tokenizer round trip); the thinking span
comes from the ids of the thinking markers (:func:`thinking_span`), or, where those are unknown, from
the server's reasoning parser (the capture records both facts per sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

from eagle_assets.core.tables import list_rows

QUALITY_CLASSES = (
    "error",
    "repetition_loop",
    "unfinished_thinking",
    "truncated",
    "empty_answer",
    "trivial_reasoning",
    "ok",
)

# What to change when a class is frequent (the quality check's hint).
REMEDIES = {
    "error": "see the error_rate_below_limit check and the errors logged; errors are retried on the next run",
    "repetition_loop": "raise temperature or top_p; or set token_sequences' quality_policy.repetition_loop to "
    "cut/drop; raise loop_max_share if these are not loops",
    "unfinished_thinking": "raise max_tokens (and the server's max_model_len): the thinking was cut before its end",
    "truncated": "raise max_tokens (and the server's max_model_len): answers are cut",
    "empty_answer": "check chat_template_kwargs and the server's reasoning parser: the model answers nothing "
    "after its thinking",
    "trivial_reasoning": "lower min_thinking_tokens if short thinking is fine for these prompts, or drop them "
    "with token_sequences' quality_policy.trivial_reasoning",
}


@dataclass(frozen=True)
class ThinkMarkers:
    """Token ids of the verifier's thinking markers (``<think>``, ``</think>``)."""

    start: int
    end: int


@dataclass(frozen=True)
class Thinking:
    """A completion's thinking section: ``tokens`` None = it has none (thinking off, or no markers)."""

    tokens: int | None
    unfinished: bool


def thinking_span(prompt_ids: Sequence[int], completion_ids: Sequence[int], markers: ThinkMarkers) -> Thinking:
    """Where the thinking of ``completion_ids`` ends, by marker ids.

    The section is open at the completion's start when the prompt's last marker is a start (chat
    templates open it in the generation prompt; a closed pair there means thinking is off or belongs
    to an earlier turn), or when the completion itself begins with the start marker.
    """
    prompt, completion = list(prompt_ids), list(completion_ids)
    last_start, last_end = _last_index(prompt, markers.start), _last_index(prompt, markers.end)
    first = 0
    if last_start is None or (last_end is not None and last_end > last_start):
        if not completion or completion[0] != markers.start:
            return Thinking(None, False)
        first = 1
    try:
        return Thinking(completion.index(markers.end, first) - first, False)
    except ValueError:
        return Thinking(len(completion) - first, True)


def _last_index(ids: list[int], token: int) -> int | None:
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] == token:
            return i
    return None


@dataclass(frozen=True)
class Loop:
    """Repeated n-grams of a completion: the share of its tokens they cover and where the loop starts."""

    share: float
    start: int | None  # first token of the longest stretch covered by repeated n-grams


def find_loop(ids: np.ndarray | Sequence[int], ngram: int, min_repeats: int) -> Loop:
    """Token positions covered by an n-gram that occurs at least ``min_repeats`` times.

    Counting every repeated n-gram (not only the most frequent one) also catches loops whose period is
    longer than ``ngram``: each n-gram of such a period repeats as often as the period does.
    """
    ids = np.asarray(ids, dtype=np.int32)
    length = len(ids)
    if length < ngram or ngram < 1:
        return Loop(0.0, None)
    # Each window as one opaque ngram*4-byte value: exact comparison, one sort.
    windows = np.ascontiguousarray(sliding_window_view(ids, ngram)).view(np.dtype((np.void, 4 * ngram))).ravel()
    _, inverse, counts = np.unique(windows, return_inverse=True, return_counts=True)
    starts = np.flatnonzero(counts[inverse.ravel()] >= min_repeats)
    if not starts.size:
        return Loop(0.0, None)
    edges = np.zeros(length + 1, np.int32)
    edges[starts] += 1
    edges[starts + ngram] -= 1
    covered = np.cumsum(edges[:length]) > 0
    padded = np.concatenate([[False], covered, [False]])
    bounds = np.flatnonzero(padded[1:] != padded[:-1])
    run_starts, run_ends = bounds[::2], bounds[1::2]
    longest = int(np.argmax(run_ends - run_starts))  # the earliest of equally long stretches
    return Loop(float(covered.mean()), int(run_starts[longest]))


@dataclass(frozen=True)
class QualityRules:
    """The thresholds of the classes (``reasoning_samples``' config fields of the same names)."""

    min_thinking_tokens: int = 16
    loop_ngram: int = 16
    loop_min_repeats: int = 4
    loop_max_share: float = 0.3

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    quality: str
    loop_start: int | None = None  # set for repetition_loop: where ``cut`` truncates the completion


def classify(
    status: str | None,
    finish_reason: str | None,
    token_ids: np.ndarray | Sequence[int] | None,
    content: str | None,
    thinking_tokens: int | None,
    unfinished_thinking: bool | None,
    rules: QualityRules,
) -> Verdict:
    """The class of one sample (precedence in the module docstring)."""
    if status != "ok":
        return Verdict("error")
    if token_ids is not None:
        loop = find_loop(token_ids, rules.loop_ngram, rules.loop_min_repeats)
        if loop.share > rules.loop_max_share:
            return Verdict("repetition_loop", loop.start)
    if unfinished_thinking:
        return Verdict("unfinished_thinking")
    if finish_reason == "length":
        return Verdict("truncated")
    if not (content or "").strip():
        return Verdict("empty_answer")
    if thinking_tokens is not None and thinking_tokens < rules.min_thinking_tokens:
        return Verdict("trivial_reasoning")
    return Verdict("ok")


def count_classes(classes: Sequence[str | None]) -> dict[str, int]:
    """Samples per class, every class named (in precedence order)."""
    return {name: sum(1 for c in classes if c == name) for name in QUALITY_CLASSES}


QUALITY_SCHEMA = pa.schema(
    [("prompt_id", pa.string()), ("finished_at", pa.float64()), ("quality", pa.string()), ("loop_start", pa.int32())]
)


def classify_samples(samples: pa.Table, rules: QualityRules) -> pa.Table:
    """``QUALITY_SCHEMA`` rows for ``samples`` (any columns missing from older shards count as null)."""

    def column(name: str) -> list:
        return samples[name].to_pylist() if name in samples.column_names else [None] * samples.num_rows

    token_ids = list_rows(samples["token_ids"]) if "token_ids" in samples.column_names else column("token_ids")
    verdicts = [
        classify(status, finish, ids, content, thinking, unfinished, rules)
        for status, finish, ids, content, thinking, unfinished in zip(
            column("status"),
            column("finish_reason"),
            token_ids,
            column("content"),
            column("thinking_tokens"),
            column("unfinished_thinking"),
        )
    ]
    return pa.table(
        {
            "prompt_id": column("prompt_id"),
            "finished_at": column("finished_at"),
            "quality": [v.quality for v in verdicts],
            "loop_start": [v.loop_start for v in verdicts],
        },
        schema=QUALITY_SCHEMA,
    )
