"""The template drift check: re-render a sample of server-token samples through the local chat template and
tokenizer and compare ids exactly. Prompts render deterministically, so a prompt mismatch means another
template or tokenizer; ``hidden_states`` refuses rows whose recorded prompt drift is above the limit."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pyarrow as pa

from eagle_assets.core.tables import list_rows
from eagle_assets.token_sequences.build import Renderer, column_or_nulls, sample_contexts, template_kwargs

# Prompts render deterministically: any prompt mismatch means another template or tokenizer.
MAX_PROMPT_MISMATCH_RATE = 0.0
# What to change when prompts drift: the template_drift check and hidden_states, refusing such rows, say it.
PROMPT_DRIFT_FIX = (
    "The local chat template or tokenizer is not the one that rendered the samples' prompts: point "
    "verifier.model_path (and verifier.backend) at the folder the server served them from, or re-materialize "
    "reasoning_samples with vllm_server serving the verifier's folder (its samples get a sample set of their "
    "own), then token_sequences"
)


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


def measure_drift(
    samples: pa.Table, messages: dict[str, list[dict]], render: Renderer, sample_size: int, seed: int = 0
) -> DriftReport:
    """Re-render up to ``sample_size`` server-token samples locally and compare ids exactly.

    A prompt mismatch means the local chat template or tokenizer is not the one the server used
    (prompts are deterministic); completion mismatches can also come from the model sampling a
    non-canonical tokenization, so a few are normal.
    """
    ids, statuses = column_or_nulls(samples, "prompt_id"), column_or_nulls(samples, "status")
    prompts, completions = list_rows(samples["prompt_token_ids"]), list_rows(samples["token_ids"])
    context = sample_contexts(samples, messages)
    candidates = [
        i
        for i in range(len(ids))
        if statuses[i] == "ok"
        and prompts[i] is not None
        and len(prompts[i])
        and completions[i] is not None
        and len(completions[i])
    ]
    report = DriftReport()
    # In random order, the first `sample_size` whose context can be rebuilt: a context is built (earlier
    # answers read back) only for the samples checked, not for every row of a large partition.
    for i in random.Random(seed).sample(candidates, len(candidates)):
        if report.checked >= sample_size:
            break
        asked_with = context(i)
        if asked_with is None:
            continue
        report.checked += 1
        try:
            prompt_ids, completion_ids = render(
                asked_with, samples["reasoning"][i].as_py(), samples["content"][i].as_py(), template_kwargs(samples, i)
            )
        except ValueError as exc:
            # The reply does not round-trip through the template (e.g. a model that wrote a thinking block
            # in instant mode, which the template renders only with thinking on): its completion cannot be
            # reproduced locally. Counted, not fatal: the server's own ids are what training uses.
            report.completion_mismatches += 1
            report.examples.append(f"{ids[i]}: reply not renderable by the local template ({str(exc)[:200]})")
            continue
        server_prompt, server_completion = prompts[i].tolist(), completions[i].tolist()
        if list(prompt_ids) != server_prompt:
            report.prompt_mismatches += 1
            at = _first_difference(list(prompt_ids), server_prompt)
            report.examples.append(
                f"{ids[i]}: prompt differs at token {at} "
                f"(local {list(prompt_ids)[at : at + 5]}, server {server_prompt[at : at + 5]})"
            )
        if list(completion_ids) != server_completion:
            report.completion_mismatches += 1
    return report
