"""One row per evaluation request in ``requests.parquet``: what was asked, what vLLM returned of its
speculative decoding, and where the answer begins."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from eagle_assets.reasoning_samples.quality import ThinkMarkers, thinking_span

REQUESTS_SCHEMA = pa.schema(
    [
        ("suite", pa.string()),  # the prompt set's label (metadata key prefix)
        ("suite_name", pa.string()),
        ("suite_version", pa.string()),
        ("category", pa.string()),
        ("prompt_id", pa.string()),
        ("turn", pa.int32()),  # -1: a single-turn request; k: turn k of a conversation
        ("variant", pa.string()),
        ("num_speculative_tokens", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("answer_start", pa.int32()),  # output index where the answer begins (after the end-of-thinking token)
        ("spec_steps", pa.int32()),
        ("draft_tokens", pa.int32()),
        ("accepted_tokens", pa.int32()),
        ("acceptance_histogram", pa.list_(pa.int32())),  # verify steps that accepted exactly j draft tokens
        ("per_step_accepted", pa.list_(pa.int16())),
        ("per_step_drafted", pa.list_(pa.int16())),
        ("tau", pa.float64()),
        ("latency_s", pa.float64()),
        ("server_tokens_per_s", pa.float64()),
    ]
)


def answer_start(prompt_ids, token_ids, markers: ThinkMarkers | None) -> int | None:
    """Where the answer begins in ``token_ids``: after the end-of-thinking token (all of it when the thinking
    never ended), 0 when the output has no thinking; None when the markers or the tokens are unknown."""
    if markers is None or token_ids is None or prompt_ids is None:
        return None
    token_ids = list(token_ids)
    if thinking_span(prompt_ids, token_ids, markers).tokens is None:
        return 0
    return token_ids.index(markers.end) + 1 if markers.end in token_ids else len(token_ids)


def request_row(
    capture: dict,
    *,
    suite: str,
    suite_name: str,
    suite_version: str,
    category: str,
    num_speculative_tokens: int,
    markers: ThinkMarkers | None,
) -> dict:
    """One row of ``requests.parquet`` from a served capture row (its ``spec_decoding``, from the response)."""
    spec = capture.get("spec_decoding") or {}
    steps = spec.get("num_spec_steps")
    accepted = spec.get("num_accepted_draft_tokens")
    sampling = capture.get("sampling") or ""
    timing = capture.get("server_metrics") or {}
    return {
        "suite": suite,
        "suite_name": suite_name,
        "suite_version": suite_version,
        "category": category,
        "prompt_id": capture["prompt_id"],
        "turn": capture.get("turn", -1),
        "variant": _variant(sampling),
        "num_speculative_tokens": num_speculative_tokens,
        "status": capture["status"],
        "error": capture.get("error"),
        "finish_reason": capture.get("finish_reason"),
        "prompt_tokens": capture.get("prompt_tokens"),
        "completion_tokens": capture.get("completion_tokens"),
        "answer_start": answer_start(capture.get("prompt_token_ids"), capture.get("token_ids"), markers),
        "spec_steps": steps,
        "draft_tokens": spec.get("num_draft_tokens"),
        "accepted_tokens": accepted,
        "acceptance_histogram": spec.get("acceptance_histogram"),
        "per_step_accepted": spec.get("per_step_accepted"),
        "per_step_drafted": spec.get("per_step_drafted"),
        "tau": 1.0 + accepted / steps if steps else None,
        "latency_s": capture.get("latency_s"),
        "server_tokens_per_s": timing.get("tokens_per_second"),
    }


def _variant(sampling: str) -> str | None:
    import json

    try:
        return json.loads(sampling).get("variant") if sampling else None
    except (ValueError, AttributeError):
        return None


def requests_table(rows: Sequence[dict]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=REQUESTS_SCHEMA)
