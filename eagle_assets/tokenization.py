"""Reasoning samples → training rows (``input_ids`` + ``loss_mask``), and the template drift check.

A row is the prompt followed by the verifier's completion; the loss mask is 0 on the prompt and 1 on
the completion (thinking, answer and the stop token), since the draft must predict what the
verifier *writes*. The server's exact token ids are used when the sample has them; otherwise the
conversation is rendered through the verifier backend's chat template.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle_assets.storage import combined_hash

SEQUENCES_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("split", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("seq_len", pa.int32()),
        ("origin", pa.string()),  # "server_tokens" | "rendered"
    ]
)

# (messages, reasoning, content) -> (prompt ids, completion ids)
Renderer = Callable[[list[dict], "str | None", "str | None"], tuple[list[int], list[int]]]


@dataclass(frozen=True)
class Policy:
    max_length: int
    overlength: str  # "truncate" | "drop"
    truncated_samples: str  # "keep" | "drop"
    splits: tuple[str, ...]


@dataclass
class Built:
    rows: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    cut_to_max_length: int = 0

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=SEQUENCES_SCHEMA)


def _ids(value) -> list[int]:
    return [] if value is None else list(value)


def build_rows(samples: pa.Table, messages: dict[str, list[dict]], render: Renderer, policy: Policy) -> Built:
    """One row per usable sample; every other sample counted under the reason it was skipped."""
    out = Built()
    for s in samples.to_pylist():
        if s["status"] != "ok":
            out.skipped["error"] += 1
            continue
        if s.get("split") not in policy.splits:
            out.skipped["other_split"] += 1
            continue
        if s.get("truncated") and policy.truncated_samples == "drop":
            out.skipped["truncated_generation"] += 1
            continue
        prompt_ids, completion_ids = _ids(s.get("prompt_token_ids")), _ids(s.get("token_ids"))
        origin = "server_tokens"
        if not prompt_ids or not completion_ids:
            conversation = messages.get(s["prompt_id"])
            if conversation is None:
                out.skipped["no_prompt_row"] += 1
                continue
            prompt_ids, completion_ids = render(conversation, s.get("reasoning"), s.get("content"))
            origin = "rendered"
        if not completion_ids:
            out.skipped["empty_completion"] += 1
            continue
        total = len(prompt_ids) + len(completion_ids)
        if total > policy.max_length:
            if policy.overlength == "drop" or len(prompt_ids) >= policy.max_length:
                out.skipped["over_max_length"] += 1
                continue
            completion_ids = completion_ids[: policy.max_length - len(prompt_ids)]
            out.cut_to_max_length += 1
        ids = np.asarray(prompt_ids + completion_ids, dtype=np.int32)
        mask = np.concatenate([np.zeros(len(prompt_ids), np.int8), np.ones(len(completion_ids), np.int8)])
        out.rows.append({"prompt_id": s["prompt_id"], "split": s["split"], "input_ids": ids, "loss_mask": mask,
                         "seq_len": len(ids), "origin": origin})
    return out


def content_hash(table: pa.Table) -> str:
    """Ids, splits and the exact token and mask values: what hidden states and training read."""
    parts: list[bytes | str] = ["\x1f".join(table["prompt_id"].to_pylist()), "\x1f".join(table["split"].to_pylist())]
    for name in ("input_ids", "loss_mask"):
        column = table[name].combine_chunks()
        parts.append(pc.list_value_length(column).to_numpy().tobytes())
        parts.append(pc.list_flatten(column).to_numpy().tobytes())
    return combined_hash(parts)[:16]


def template_hash(tokenizer) -> str:
    return hashlib.sha256((tokenizer.chat_template or "").encode()).hexdigest()[:16]


@dataclass
class DriftReport:
    """How often the local template + tokenizer reproduce the server's tokens on a sample."""

    checked: int = 0
    prompt_mismatches: int = 0
    completion_mismatches: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def prompt_mismatch_rate(self) -> float:
        return self.prompt_mismatches / self.checked if self.checked else 0.0

    @property
    def completion_mismatch_rate(self) -> float:
        return self.completion_mismatches / self.checked if self.checked else 0.0

    def metadata(self) -> dict:
        return {
            "drift_checked": self.checked,
            "drift_prompt_mismatch_rate": self.prompt_mismatch_rate,
            "drift_completion_mismatch_rate": self.completion_mismatch_rate,
        }


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def measure_drift(samples: pa.Table, messages: dict[str, list[dict]], render: Renderer,
                  sample_size: int, seed: int = 0) -> DriftReport:
    """Re-render up to ``sample_size`` server-token samples locally and compare ids exactly.

    A prompt mismatch means the local chat template or tokenizer is not the one the server used
    (prompts are deterministic); completion mismatches can also come from the model sampling a
    non-canonical tokenization, so a few are normal.
    """
    candidates = [
        s for s in samples.to_pylist()
        if s["status"] == "ok" and s.get("prompt_token_ids") and s.get("token_ids") and s["prompt_id"] in messages
    ]
    report = DriftReport()
    for s in random.Random(seed).sample(candidates, min(sample_size, len(candidates))):
        prompt_ids, completion_ids = render(messages[s["prompt_id"]], s.get("reasoning"), s.get("content"))
        server_prompt, server_completion = list(s["prompt_token_ids"]), list(s["token_ids"])
        report.checked += 1
        if prompt_ids != server_prompt:
            report.prompt_mismatches += 1
            at = _first_difference(prompt_ids, server_prompt)
            report.examples.append(f"{s['prompt_id']}: prompt differs at token {at} "
                                   f"(local {prompt_ids[at:at + 5]}, server {server_prompt[at:at + 5]})")
        if completion_ids != server_completion:
            report.completion_mismatches += 1
    return report
