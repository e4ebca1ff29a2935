"""Which assistant turns of a conversation are regenerated, and in what context each is asked.

``turns: last`` (the default) asks the verifier once per prompt, for the answer to the conversation's
last user turn, with the dataset's own earlier assistant turns in the context as they are. Those rows
have ``turn`` :data:`LAST_TURN_ONLY`.

``turns: all`` regenerates every assistant turn. The dataset's assistant messages are dropped and the
conversation is replayed: turn ``k`` (0-based) is asked with everything up to the end of the ``k``-th
user turn, each earlier user turn followed by the verifier's *own* stored answer to it. An answer goes
back as ``{"role": "assistant", "content": …, "reasoning": …, "reasoning_content": …}``: vLLM (0.32)
reads ``reasoning`` and hands the chat template both names, as this message does when rendered locally,
and the template decides what stays (Qwen3's drops the thinking of turns before the last user
message). Those rows have ``turn`` = ``k``.

A conversation's turns are asked in order, one at a time; a resumed run starts each conversation at
its first turn without an ok row (:func:`pending_conversations`), so a stored turn is never asked again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eagle_assets.reasoning_samples.requests import Sampling


@dataclass(frozen=True)
class Answer:
    """The verifier's stored answer to one turn, as it goes back into the next turn's context."""

    content: str | None
    reasoning: str | None

    def message(self) -> dict:
        reply = {"role": "assistant", "content": self.content or ""}
        if self.reasoning is not None:  # both names: what vLLM gives the template, and older servers read
            reply["reasoning"] = reply["reasoning_content"] = self.reasoning
        return reply


def user_turns(messages: list[dict]) -> list[list[dict]]:
    """The conversation without its assistant messages, cut after each user turn (a run of user
    messages counts as one turn: nothing answered between them). A system message opens the first."""
    turns: list[list[dict]] = [[]]
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            continue
        turns[-1].append(message)
        following = messages[i + 1]["role"] if i + 1 < len(messages) else None
        if message["role"] == "user" and following != "user":
            turns.append([])
    return [turn for turn in turns if turn]


def turn_count(messages: list[dict]) -> int:
    return len(user_turns(messages))


def turn_context(messages: list[dict], turn: int, answers: list[Answer]) -> list[dict]:
    """What turn ``turn`` is asked with: the user turns up to it, each earlier one followed by
    ``answers[i]`` (the verifier's own answer to turn ``i``)."""
    turns = user_turns(messages)
    if not 0 <= turn < len(turns) or len(answers) < turn:
        raise ValueError(
            f"turn {turn} of a {len(turns)}-turn conversation needs {turn} earlier answers, got {len(answers)}"
        )
    context: list[dict] = []
    for i in range(turn):
        context += [*turns[i], answers[i].message()]
    return [*context, *turns[turn]]


@dataclass(frozen=True)
class Conversation:
    """One conversation still to regenerate: its next turn and the stored answers before it."""

    prompt_id: str
    messages: list[dict]
    split: str | None
    next_turn: int
    answers: list[Answer] = field(default_factory=list)
    sampling: Sampling | None = None  # the conversation's sampling variant, for every turn; None: the engine's

    @property
    def turns_left(self) -> int:
        return turn_count(self.messages) - self.next_turn


def pending_conversations(
    prompts: Iterable[tuple[str, list[dict], str | None]], stored: Mapping[tuple[str, int], Answer]
) -> list[Conversation]:
    """Conversations with a turn not yet stored ok, each starting at its first such turn.

    ``stored``: ``(prompt_id, turn)`` -> answer, for every turn whose latest row is ok. A turn after a
    missing one is asked again (its stored context would not be the one the new answer makes).
    """
    out = []
    for prompt_id, messages, split in prompts:
        answers: list[Answer] = []
        while (prompt_id, len(answers)) in stored:
            answers.append(stored[prompt_id, len(answers)])
        if len(answers) < turn_count(messages):
            out.append(Conversation(prompt_id, messages, split, len(answers), answers))
    return out
