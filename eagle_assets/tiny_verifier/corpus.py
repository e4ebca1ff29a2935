"""Synthetic conversations the tiny verifier learns from.

Mostly step-by-step arithmetic in the verifier's worked style (:mod:`eagle_assets.tiny_verifier.arithmetic`), plus a
share of everyday chat questions answered in one short fixed style, so the model stops with
``<|im_end|>`` on any prompt (general chat, a system message, several turns), not only on sums.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eagle_assets.tiny_verifier.arithmetic import (
    OPERATION_WORDS,
    QUESTION_TEMPLATES,
    Problem,
    make_problem,
    worked_solution,
)
from eagle_assets.tiny_verifier.recipe import TinyVerifierRecipe

CHAT_THINKING = "This is not an arithmetic problem.\nI will explain what I can do."
CHAT_ANSWER = (
    "I am a small arithmetic model. I can add, subtract and multiply numbers step by step. "
    "Ask me something like: What is 12 + 34?"
)

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a careful math tutor. Show your work.",
    "You are a concise assistant.",
    "Answer the user's questions accurately.",
    "You are Qwen, a helpful assistant.",
    "Think step by step before answering.",
    "You are a friendly chatbot that helps students with homework.",
    "Keep answers short.",
)

_TOPICS = (
    "the weather",
    "photosynthesis",
    "the French revolution",
    "black holes",
    "machine learning",
    "the water cycle",
    "volcanoes",
    "the stock market",
    "jazz music",
    "the Roman empire",
    "climate change",
    "quantum computing",
    "the human heart",
    "bees",
    "the moon landing",
    "coffee",
    "chess",
    "poetry",
    "the internet",
    "electric cars",
    "gravity",
    "the ocean",
    "dinosaurs",
    "vaccines",
    "democracy",
    "the Python programming language",
    "sleep",
    "renewable energy",
    "the Great Wall of China",
    "rainbows",
    "earthquakes",
    "the immune system",
    "Shakespeare",
    "bread baking",
    "the speed of light",
    "DNA",
    "soccer",
    "meditation",
    "the printing press",
    "cats",
    "mountains",
    "public speaking",
    "recycling",
)
_FRAMES = (
    "Tell me about {t}.",
    "Can you explain {t}?",
    "Write a short poem about {t}.",
    "What are three facts about {t}?",
    "Why is {t} important?",
    "Summarize the history of {t}.",
    "Give me a fun fact about {t}.",
    "How would you describe {t} to a child?",
    "What do you think about {t}?",
    "I am writing an essay on {t}. Any tips?",
    "Explain {t} in one sentence.",
    "What is the most surprising thing about {t}?",
    "Compare {t} and {u}.",
    "Write a haiku about {t}.",
    "List some books about {t}.",
)
_STANDALONE = (
    "Hello!",
    "Hi, how are you?",
    "Who are you?",
    "What can you do?",
    "Thanks!",
    "Good morning.",
    "Translate 'good night' into Spanish.",
    "Write a Python function that reverses a string.",
    "What is the capital of France?",
    "Recommend a movie for tonight.",
    "How do I make pancakes?",
    "Can you help me plan a trip to Japan?",
    "What's your favorite color?",
    "Tell me a joke.",
    "How many legs does a spider have?",
    "What year did World War II end?",
    "Fix this code: for i in range(10) print(i)",
    "Write an email asking for a day off.",
    "What is the meaning of life?",
    "Is it going to rain tomorrow?",
    "asdf qwerty zxcv",
    "Please summarize the following text: The quick brown fox jumps over the lazy dog.",
    "I feel tired today. Any advice?",
    "Explain recursion.",
    "What is 2FA and why should I use it?",
    "Convert 5 miles to kilometers.",
    "What time is it in Tokyo?",
    "Describe your ideal weekend.",
)


@dataclass(frozen=True)
class Conversation:
    """One training row: the messages up to the last user turn, and the assistant's reply."""

    messages: list[dict[str, str]]
    reasoning: str
    answer: str
    enable_thinking: bool = True


def _chat_question(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(_STANDALONE)
    t, u = rng.sample(_TOPICS, 2)
    question = rng.choice(_FRAMES).format(t=t, u=u)
    if roll > 0.85:  # longer, multi-sentence prompts like real chat datasets have
        question = f"{question} {rng.choice(_FRAMES).format(t=u, u=t)} Please be detailed."
    return question


def _wide_problem(rng: random.Random) -> Problem:
    """Operands outside :func:`make_problem`'s ranges, so unusual numbers still get the worked style."""
    op = rng.choice(tuple(OPERATION_WORDS))
    a, b = rng.randint(0, 9999), rng.randint(0, 99 if op == "*" else 9999)
    if op == "-" and b > a:
        a, b = b, a
    question = rng.choice(QUESTION_TEMPLATES).format(a=a, op=op, b=b, word=OPERATION_WORDS[op])
    return Problem(a, op, b, question)


def _final_turn(rng: random.Random, recipe: TinyVerifierRecipe) -> tuple[str, str, str]:
    """(user text, reasoning, answer) of the turn the model must reply to."""
    if rng.random() < recipe.share_chat:
        return _chat_question(rng), CHAT_THINKING, CHAT_ANSWER
    problem = _wide_problem(rng) if rng.random() < recipe.share_wide_numbers else make_problem(rng)
    reasoning, answer = worked_solution(problem)
    return problem.question, reasoning, answer


def make_conversation(rng: random.Random, recipe: TinyVerifierRecipe) -> Conversation:
    messages: list[dict[str, str]] = []
    if rng.random() < recipe.share_system:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if rng.random() < recipe.share_multi_turn:
        for _ in range(rng.randint(1, 2)):
            user, _, answer = _final_turn(rng, recipe)
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    user, reasoning, answer = _final_turn(rng, recipe)
    messages.append({"role": "user", "content": user})
    if rng.random() < recipe.share_no_thinking:
        return Conversation(messages, "", answer, enable_thinking=False)
    return Conversation(messages, reasoning, answer)


def make_conversations(n: int, seed: int, recipe: TinyVerifierRecipe) -> list[Conversation]:
    rng = random.Random(seed)
    return [make_conversation(rng, recipe) for _ in range(n)]
