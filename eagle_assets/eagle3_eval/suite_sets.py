"""The prompt sets one ``eagle3_eval`` measures, in order: the run's held-out prompts (``heldout``), the
out-of-distribution set (``ood``), and any registered evaluation suite by name (``mt_bench``, ``gsm8k``, …;
``eagle_assets.plugins.eval_suites`` and the plugins' ``register_eval_suites``).

Each becomes a :class:`SuiteSet`: its label (the metadata key prefix), name, version (recorded in the report),
category and the requests to send. A registered suite's prompt of several turns is a
:class:`~eagle_assets.reasoning_samples.turns.Conversation`: its turns asked in order, each with the verifier's
own answers before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from eagle_assets.core.layout import PROMPTS, asset_folder, current_version
from eagle_assets.reasoning_samples.requests import PromptRequest
from eagle_assets.reasoning_samples.turns import Conversation
from eagle_assets.suites import EvalSuite, SuitePrompt, SuiteUnavailable

HELDOUT_SUITE, OOD_SUITE = "heldout", "ood"
DEFAULT_SUITES = (HELDOUT_SUITE, OOD_SUITE)


class SuiteError(ValueError):
    """A suite cannot be measured; the message says what to set or fix."""


@dataclass
class SuiteSet:
    """One prompt set to measure and what the report records of it."""

    label: str
    name: str
    version: str
    category: str
    items: list[PromptRequest | Conversation]
    categories: dict[str, str] = field(default_factory=dict)  # prompt id -> category (default: ``category``)
    location: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # skip reason -> rows

    def category_of(self, prompt_id: str) -> str:
        return self.categories.get(prompt_id, self.category)

    def record(self) -> dict:
        """The report's (and lineage's) record of the suite."""
        return {
            "label": self.label,
            "name": self.name,
            "version": self.version,
            "category": self.category,
            "location": self.location,
            "prompts": len(self.items),
            "skipped": dict(self.skipped),
        }


def suites_table(records: Sequence[dict]) -> str:
    """The measured sets (their :meth:`SuiteSet.record`): label, name, version, category, prompts and skipped rows."""
    lines = ["| prompt set | suite | version | category | prompts | skipped |", "|---|---|---|---|---|---|"]
    for s in records:
        skipped = ", ".join(f"{kind} {n}" for kind, n in s["skipped"].items()) or "—"
        lines.append(f"| {s['label']} | {s['name']} | {s['version']} | {s['category']} | {s['prompts']} | {skipped} |")
    return "\n".join(lines)


def check_suite_names(names: Sequence[str], registered: Mapping[str, EvalSuite]) -> None:
    """Every name is ``heldout``, ``ood`` or a registered suite, none twice, and ``heldout`` among them (the
    in-distribution τ the acceptance floor checks)."""
    unknown = [n for n in names if n not in DEFAULT_SUITES and n not in registered]
    if unknown:
        raise SuiteError(
            f"unknown eval suites {unknown}: the suites are {', '.join([*DEFAULT_SUITES, *registered])} "
            "(`eagle-assets plugins` lists the plugins; a suite's plugin must be installed or in $EAGLE_ASSETS_PLUGINS)"
        )
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise SuiteError(f"eval suites {repeated} are listed more than once")
    if HELDOUT_SUITE not in names:
        raise SuiteError(
            f"suites {list(names)} leave out {HELDOUT_SUITE!r}: the held-out τ is what the acceptance floor "
            "checks and what the simulated value is computed on; keep it in the list"
        )


def prompts_version(root, partitions: Sequence[str]) -> str:
    """The held-out (out-of-distribution) set's version: the prompts data version of each partition."""
    return "+".join(f"{p}@{current_version(asset_folder(root, PROMPTS, p)) or '?'}" for p in partitions)


def dataset_set(label: str, name: str, root, partitions: Sequence[str], requests) -> SuiteSet:
    """The held-out or out-of-distribution prompts as a suite: one category, their partitions'."""
    return SuiteSet(label, name, prompts_version(root, partitions), "+".join(partitions), list(requests))


def request_of(prompt: SuitePrompt) -> PromptRequest | Conversation:
    """One request, or a conversation of turns asked in order."""
    if len(prompt.turns) == 1:
        return PromptRequest(prompt.prompt_id, prompt.messages(), None)
    return Conversation(prompt.prompt_id, prompt.messages(), None, 0, [])


def registered_set(suite: EvalSuite, location: str | None, limit: int, log) -> SuiteSet:
    """The first ``limit`` prompts of a registered suite, its bad rows counted by reason (and logged)."""
    try:
        version = suite.resolved_version(location)
        prompts, skipped, examples = [], Counter(), {}
        seen = set()
        for item in suite.prompts(location):
            if isinstance(item, SuitePrompt):
                if item.prompt_id in seen:
                    skipped["duplicate_id"] += 1
                    examples.setdefault("duplicate_id", f"prompt id {item.prompt_id!r} again")
                    continue
                seen.add(item.prompt_id)
                if len(prompts) < limit:
                    prompts.append(item)
            else:
                skipped[item.kind] += 1
                examples.setdefault(item.kind, f"{item.row}: {item.reason}")
    except SuiteUnavailable as exc:
        raise SuiteError(str(exc)) from None
    for kind, example in examples.items():
        log.warning(f"eval suite {suite.name}: {skipped[kind]} rows skipped ({kind}), e.g. {example}")
    if not prompts:
        raise SuiteError(
            f"eval suite {suite.name!r} at {location or suite.default_location!r} has no usable prompt"
            + (f" (skipped: {dict(skipped)})" if skipped else "")
            + "; point eagle3_eval's suite_locations at a copy of the right shape"
        )
    return SuiteSet(
        label=suite.name,
        name=suite.name,
        version=version,
        category=suite.category,
        items=[request_of(p) for p in prompts],
        categories={p.prompt_id: p.category for p in prompts},
        location=location or suite.default_location,
        skipped=dict(skipped),
    )


def registered_sets(
    names: Sequence[str], registered: Mapping[str, EvalSuite], locations: Mapping[str, str], limit: int, log
) -> list[SuiteSet]:
    """The registered suites among ``names``, in order (``heldout``/``ood`` are the plan's own sets)."""
    unused = sorted(set(locations) - set(names))
    if unused:
        raise SuiteError(f"suite_locations names suites {unused} that `suites` does not list")
    return [
        registered_set(registered[name], locations.get(name) or None, limit, log)
        for name in names
        if name not in DEFAULT_SUITES
    ]
