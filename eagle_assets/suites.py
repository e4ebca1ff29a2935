"""The evaluation-suite contract: what a plugin registers through ``register_eval_suites``.

An evaluation suite is a named, versioned set of prompts that ``eagle3_eval`` measures a draft on beside the
run's own held-out prompts: MT-Bench, GSM8K, HumanEval, MATH-500, AIME (``eagle_assets.plugins.eval_suites``),
or a user's own. Published drafts are compared on such suites, so the same suite read the same way gives a
number that stands beside theirs.

A suite yields :class:`SuitePrompt` rows: one or more user turns, asked in order (turn ``k`` with the
verifier's own answers to the turns before it, as MT-Bench's second turn is), and a category (MT-Bench's
``writing``, MATH-500's subject; the suite's own category otherwise), so τ is reported per category too. A row
the suite cannot use is yielded as :class:`~eagle_assets.sources.SkippedRow` with a reason, never raised: one
bad row never loses the rest of the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from eagle_assets.sources import SkippedRow


class SuiteUnavailable(Exception):
    """The suite cannot be read at all (no hub access and no local copy, a missing file, an unreadable one).

    Raise it from :meth:`EvalSuite.prompts` or :meth:`EvalSuite.resolved_version` before any row is yielded,
    with a message naming the location to set and the shape the files must have.
    """


@dataclass(frozen=True)
class SuitePrompt:
    """One prompt of a suite. ``prompt_id`` is stable for a suite version (the dataset's own id when it has one)."""

    prompt_id: str
    turns: tuple[str, ...]  # the user turns, asked in order
    category: str
    system: str | None = None

    def messages(self) -> list[dict]:
        """The conversation to replay: each user turn followed by an (empty) assistant answer, whose place
        the verifier's own answer takes when the next turn is asked."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for i, turn in enumerate(self.turns):
            messages.append({"role": "user", "content": turn})
            if i + 1 < len(self.turns):
                messages.append({"role": "assistant", "content": ""})
        return messages


@dataclass
class EvalSuite:
    """A named evaluation suite. Subclass it and implement :meth:`prompts`.

    ``version`` goes into the evaluation's report: bump it whenever the prompts it yields change (another
    prompt template, another selection); :meth:`resolved_version` adds the data's own version (the dataset
    revision, the files' hash).
    """

    name: str
    description: str
    category: str  # what the suite measures (chat, math, code, ...); a prompt's category when it names none
    version: str = "1"
    # Where the rows live when eagle3_eval's ``suite_locations`` names nothing (a hub id, a file or a folder).
    default_location: str | None = None

    def prompts(self, location: str | None = None) -> Iterator[SuitePrompt | SkippedRow]:
        """Yield every prompt of the suite, in a stable order."""
        raise NotImplementedError(f"eval suite {self.name!r} does not implement prompts()")

    def resolved_version(self, location: str | None = None) -> str:
        """The version recorded in the report: the suite's own, plus the data's where the suite knows it."""
        return self.version
