"""vLLM's speculative-decoding counters, read from its Prometheus ``/metrics`` endpoint.

vLLM counts, per engine, how many drafts it proposed (``vllm:spec_decode_num_drafts_total``), how
many draft tokens it verified and accepted, and how many were accepted at each draft position
(``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}``, k from 0). The counters are
cumulative since the server started, so a measurement is the difference of two snapshots taken
around the requests; engines (data-parallel replicas, several servers) are summed.

Acceptance length τ follows vLLM's convention: ``τ = 1 + accepted / drafts`` — every verification
step emits the verifier's own (bonus) token besides the accepted draft tokens, so a draft that is
never right still gives τ = 1 and a perfect draft of K tokens gives K + 1. Per-position acceptance
is ``accepted_at_pos[k] / drafts``: position k counts only when positions 0..k-1 were accepted too,
so it never increases with k.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
RUNNING = "vllm:num_requests_running"
GENERATION_TOKENS = "vllm:generation_tokens"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """One snapshot (or the difference of two) of vLLM's speculative-decoding counters."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()
    generation_tokens: float = 0.0
    requests_running: float = 0.0
    spec_decode_enabled: bool = False

    def _combine(self, other: SpecDecodeCounters, op, running: float) -> SpecDecodeCounters:
        width = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        mine = self.accepted_per_pos + (0.0,) * (width - len(self.accepted_per_pos))
        theirs = other.accepted_per_pos + (0.0,) * (width - len(other.accepted_per_pos))
        return SpecDecodeCounters(
            drafts=op(self.drafts, other.drafts),
            draft_tokens=op(self.draft_tokens, other.draft_tokens),
            accepted=op(self.accepted, other.accepted),
            accepted_per_pos=tuple(op(a, b) for a, b in zip(mine, theirs)),
            generation_tokens=op(self.generation_tokens, other.generation_tokens),
            requests_running=running,
            spec_decode_enabled=self.spec_decode_enabled or other.spec_decode_enabled,
        )

    def __sub__(self, before: SpecDecodeCounters) -> SpecDecodeCounters:
        """What happened between two snapshots (the gauge keeps the later value)."""
        return self._combine(before, operator.sub, self.requests_running)

    def __add__(self, other: SpecDecodeCounters) -> SpecDecodeCounters:
        """Two servers' counters together."""
        return self._combine(other, operator.add, self.requests_running + other.requests_running)

    @property
    def acceptance_length(self) -> float:
        """τ = 1 + accepted / drafts (vLLM's convention: the bonus token counts)."""
        if self.drafts <= 0:
            raise ValueError("no speculative drafts were counted: is speculative decoding on for this server?")
        return 1.0 + self.accepted / self.drafts

    @property
    def acceptance_per_position(self) -> tuple[float, ...]:
        """accepted_at_pos[k] / drafts for k = 0..K-1 (reported as positions 1..K)."""
        if self.drafts <= 0:
            raise ValueError("no speculative drafts were counted: is speculative decoding on for this server?")
        return tuple(a / self.drafts for a in self.accepted_per_pos)


@dataclass
class _Sums:
    scalars: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    per_pos: dict[int, float] = field(default_factory=lambda: defaultdict(float))


def parse_metrics(text: str) -> SpecDecodeCounters:
    """Parse a Prometheus text exposition into counters, summed over engines and models."""
    sums = _Sums()
    seen_spec = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # the creation timestamp prometheus_client adds to every counter
            if family.name == ACCEPTED_PER_POS:
                sums.per_pos[int(sample.labels["position"])] += sample.value
                seen_spec = True
            elif family.name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, GENERATION_TOKENS, RUNNING):
                sums.scalars[family.name] += sample.value
                seen_spec = seen_spec or family.name == DRAFTS
    positions = range(max(sums.per_pos) + 1) if sums.per_pos else range(0)
    return SpecDecodeCounters(
        drafts=sums.scalars[DRAFTS],
        draft_tokens=sums.scalars[DRAFT_TOKENS],
        accepted=sums.scalars[ACCEPTED],
        accepted_per_pos=tuple(sums.per_pos[k] for k in positions),
        generation_tokens=sums.scalars[GENERATION_TOKENS],
        requests_running=sums.scalars[RUNNING],
        spec_decode_enabled=seen_spec,
    )


def metrics_url(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port/metrics`` (``/metrics`` is not under ``/v1``)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


def fetch_counters(base_urls: list[str], timeout_s: float = 30.0) -> SpecDecodeCounters:
    """One snapshot summed over every server (data-parallel replicas)."""
    total = SpecDecodeCounters()
    with httpx.Client(timeout=timeout_s) as client:
        for url in base_urls:
            response = client.get(metrics_url(url))
            response.raise_for_status()
            total = total + parse_metrics(response.text)
    return total
