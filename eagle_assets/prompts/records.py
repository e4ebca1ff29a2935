"""Turn one raw dataset row into a validated prompt: messages, reference answer, stable id, group, split.

Sources stay thin readers (``eagle_assets.sources``); every rule about what a usable prompt is lives
here so that all datasets are held to the same rules and ids.

* Both chat shapes are accepted: OpenAI ``messages`` (``role``/``content``) and ShareGPT
  ``conversations`` (``from``/``value``, with ``human``/``gpt`` speaker names).
* The prompt is the conversation up to and including its last user turn; the assistant turn(s)
  after it are the dataset's original answer (``reference``), kept for the static-data baseline.
* ``prompt_id`` hashes the source name and the *normalized* messages, so re-reading the same data
  gives the same ids, and two rows that differ only in whitespace or Unicode form are duplicates.
* ``group_id`` names the problem (the row's ``group`` key, else its normalized text) and decides the
  split (``eagle_assets.prompts.splits``), so one problem worded two ways never lands on both sides.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eagle_assets.core.files import combined_hash
from eagle_assets.prompts.splits import SplitRule, default_group_key, group_id
from eagle_assets.sources import RawRecord, SkippedRow

# Speaker names seen in the wild, mapped onto the three roles a chat template understands.
ROLE_ALIASES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
}

# Every reason a row can be skipped for; the prompts asset reports a count for each.
SKIP_REASONS = (
    "unreadable",  # the source could not parse the row at all (broken JSON line, bad Parquet row)
    "no_messages",  # neither a `messages` nor a `conversations` list
    "bad_turn",  # a turn that is not an object with a role and a content
    "unknown_role",
    "misplaced_system",
    "no_user_turn",
    "empty_content",
    "non_string_content",
    "not_utf8",
    "bad_group",  # a `group` key that is not a non-empty string or integer
)


class RowRejected(ValueError):
    """A row that breaks a rule; ``reason`` is one of :data:`SKIP_REASONS`."""

    def __init__(self, reason: str, detail: str):
        assert reason in SKIP_REASONS, reason
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Skip:
    """A skipped row, ready to count (``reason``) and to show a user (``message``)."""

    source: str
    row: str
    reason: str
    detail: str

    @property
    def message(self) -> str:
        return f"source {self.source!r}, row {self.row}: {self.reason}: {self.detail}"


@dataclass(frozen=True)
class Prompt:
    """One row of the ``prompts`` table (its Parquet schema: :data:`PROMPTS_SCHEMA`)."""

    prompt_id: str
    source: str
    source_id: str
    messages: list[dict[str, str]]
    reference: str | None
    split: str
    group_id: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt_id,
            "source": self.source,
            "source_id": self.source_id,
            "messages": self.messages,
            "reference": self.reference,
            "split": self.split,
            "group_id": self.group_id,
            "metadata": json.dumps(self.metadata, sort_keys=True, ensure_ascii=False, default=str),
        }


def _text(value: Any, where: str) -> str:
    """A turn's content as clean text, or the reason it is not usable."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RowRejected(
                "not_utf8",
                f"{where} has bytes that are not UTF-8 ({exc.reason} at byte {exc.start}); "
                "re-encode the dataset as UTF-8",
            ) from None
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in value):
        # OpenAI content parts: text-only parts are plain text split in pieces.
        value = "".join(str(p.get("text", "")) for p in value)
    if not isinstance(value, str):
        raise RowRejected(
            "non_string_content",
            f"{where} content is {type(value).__name__}, not text (images and other parts are not supported)",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates: bytes a reader decoded with surrogateescape
        raise RowRejected(
            "not_utf8", f"{where} holds undecodable characters at position {exc.start}; re-encode the dataset as UTF-8"
        ) from None
    # NFC + unified newlines + trimmed ends: the same prompt typed twice gets the same id.
    value = unicodedata.normalize("NFC", value.replace("\r\n", "\n")).strip()
    if not value:
        raise RowRejected("empty_content", f"{where} is empty")
    return value


def _turns(data: dict[str, Any]) -> list[dict[str, str]]:
    """The row's turns as ``{role, content}`` with roles mapped onto system/user/assistant."""
    if isinstance(data.get("messages"), list):
        turns, role_key, content_key = data["messages"], "role", "content"
    elif isinstance(data.get("conversations"), list):
        turns, role_key, content_key = data["conversations"], "from", "value"
    else:
        raise RowRejected(
            "no_messages",
            f"no `messages` (OpenAI shape) or `conversations` (ShareGPT shape) list; keys are {sorted(data)}",
        )
    out = []
    for i, turn in enumerate(turns):
        where = f"turn {i}"
        if not isinstance(turn, dict) or role_key not in turn or content_key not in turn:
            raise RowRejected("bad_turn", f"{where} is not an object with `{role_key}` and `{content_key}`")
        raw_role = turn[role_key]
        role = ROLE_ALIASES.get(raw_role.strip().lower()) if isinstance(raw_role, str) else None
        if role is None:
            raise RowRejected(
                "unknown_role",
                f"{where} has role {raw_role!r}; use one of {sorted(ROLE_ALIASES)}",
            )
        if role == "system" and i != 0:
            raise RowRejected("misplaced_system", f"{where} is a system turn; only the first turn may be one")
        out.append({"role": role, "content": _text(turn[content_key], f"{where} ({raw_role})")})
    return out


def prompt_id(source: str, messages: list[dict[str, str]]) -> str:
    """16 hex digits of sha256 over the source name and the normalized messages."""
    canonical = json.dumps(messages, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return combined_hash([source, canonical])[:16]


def _group_key(data: dict[str, Any], messages: list[dict[str, str]]) -> str:
    """The row's own ``group`` (the problem it asks, as the dataset names it), else the normalized text."""
    if "group" not in data or data["group"] is None:
        return default_group_key(messages)
    group = data["group"]
    if isinstance(group, bool) or not isinstance(group, (str, int)) or not str(group).strip():
        raise RowRejected(
            "bad_group",
            f"`group` is {group!r}: give a non-empty string (or integer) naming the "
            "problem the row asks, or leave it out to group by the prompt's normalized text",
        )
    return f"given:{str(group).strip()}"


def to_prompt(source: str, record: RawRecord, rule: SplitRule = SplitRule()) -> Prompt:
    """Validate and normalize one raw record; raises :class:`RowRejected` with the reason."""
    turns = _turns(record.data)
    user_turns = [i for i, t in enumerate(turns) if t["role"] == "user"]
    if not user_turns:
        roles = ", ".join(t["role"] for t in turns) or "none"
        raise RowRejected("no_user_turn", f"no user/human turn (roles: {roles}); a prompt needs one")
    last_user = user_turns[-1]
    messages, answer = turns[: last_user + 1], turns[last_user + 1 :]
    reference = "\n\n".join(t["content"] for t in answer) if answer else None
    pid = prompt_id(source, messages)
    metadata = record.data.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    metadata.setdefault("row", record.row)
    source_id = record.data.get("id")
    group = group_id(_group_key(record.data, messages))
    return Prompt(
        prompt_id=pid,
        source=source,
        source_id=str(source_id) if source_id is not None else record.row,
        messages=messages,
        reference=reference,
        split=rule.split(group),
        group_id=group,
        metadata=metadata,
    )


def classify(source: str, item: RawRecord | SkippedRow, rule: SplitRule = SplitRule()) -> Prompt | Skip:
    """A prompt, or the reason the row was skipped (for rows a source could not even read, too)."""
    if isinstance(item, SkippedRow):
        return Skip(source, item.row, item.kind, item.reason)
    try:
        return to_prompt(source, item, rule)
    except RowRejected as exc:
        return Skip(source, item.row, exc.reason, exc.detail)


# The prompts table's columns, one row per ``Prompt.as_row()``.
PROMPTS_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("source", pa.string()),
        ("source_id", pa.string()),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("reference", pa.string()),
        ("split", pa.string()),
        ("group_id", pa.string()),
        ("metadata", pa.string()),
    ]
)
