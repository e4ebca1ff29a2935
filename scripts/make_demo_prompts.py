"""Generate the bundled demo sets under ``plugins/data/`` (run once; the output is committed).

    python scripts/make_demo_prompts.py

``demo_prompts.jsonl`` (source ``demo``): arithmetic questions in ``eagle_assets.tiny_verifier.arithmetic``'s phrasings
(the tiny verifier's own) with terse "textbook" original answers, a style unlike the verifier's worked
solutions, and general-chat rows (``demo_chat_texts.py``) with short human-written answers, some
multi-turn and some with a system prompt. Every row is in the OpenAI ``messages`` shape with the original
answer as the final assistant turn; arithmetic rows carry their problem as ``group`` (operator and
operands), so the same problem worded two ways falls in one split.

``demo_ood_prompts.jsonl`` (source ``demo_ood``, evaluation only): arithmetic asked unlike anything the
verifier or the draft trained on -- other wordings (word problems, "the product of ..."), operands
of four and five digits, and a system prompt on most rows. No answers: eagle3_eval measures the
verifier's own (greedy, through vLLM speculative decoding).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from demo_chat_texts import CHAT, MULTI_TURN, WITH_SYSTEM

from eagle_assets.tiny_verifier.arithmetic import Problem, make_problem, problem_group, textbook_answer

SEED = 20240601
ARITHMETIC_ROWS = 640
DATA = Path(__file__).resolve().parent.parent / "plugins" / "data"
OUT = DATA / "demo_prompts.jsonl"
OOD_OUT = DATA / "demo_ood_prompts.jsonl"
OOD_SEED = 20240602
OOD_ROWS = 48

# Wordings none of eagle_assets.tiny_verifier.arithmetic.QUESTION_TEMPLATES uses, per operator.
OOD_TEMPLATES = {
    "+": (
        "I had {a} marbles and found {b} more. How many marbles do I have now?",
        "Find the sum of {a} and {b}.",
        "Add {a} and {b}, please.",
        "If a town has {a} people and {b} more move in, what is the new population?",
    ),
    "-": (
        "What do you get if you take {b} away from {a}?",
        "Subtract {b} from {a}.",
        "A tank holds {a} litres and {b} litres leak out. How much is left?",
        "How much bigger is {a} than {b}?",
    ),
    "*": (
        "What's the product of {a} and {b}?",
        "Multiply {a} by {b} and tell me the result.",
        "A box holds {b} rows of {a} beads. How many beads are in the box?",
        "How much do {b} tickets cost at {a} cents each, in cents?",
    ),
}
OOD_SYSTEM_PROMPTS = (
    None,
    "You are a careful calculator. Check every step before you answer.",
    "You are a patient math tutor for a middle-school student.",
    "Answer the question. Keep the final answer short.",
)


def _turns(texts: list[str], system: bool) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": texts[0]}] if system else []
    body = texts[1:] if system else texts
    roles = ("user", "assistant")
    return messages + [{"role": roles[i % 2], "content": t} for i, t in enumerate(body)]


def rows() -> list[dict]:
    rng = random.Random(SEED)
    out = []
    for i in range(ARITHMETIC_ROWS):
        problem = make_problem(rng)
        out.append(
            {
                "id": f"arith-{i:04d}",
                "messages": [
                    {"role": "user", "content": problem.question},
                    {"role": "assistant", "content": textbook_answer(problem, rng)},
                ],
                "group": problem_group(problem),
                "metadata": {"task": "arithmetic", "expected": problem.result},
            }
        )
    for i, (question, answer) in enumerate(CHAT):
        out.append({"id": f"chat-{i:03d}", "messages": _turns([question, answer], False), "metadata": {"task": "chat"}})
    for i, texts in enumerate(MULTI_TURN):
        out.append({"id": f"multi-{i:03d}", "messages": _turns(texts, False), "metadata": {"task": "chat"}})
    for i, texts in enumerate(WITH_SYSTEM):
        out.append({"id": f"system-{i:03d}", "messages": _turns(texts, True), "metadata": {"task": "chat"}})
    # Arithmetic and chat interleaved, deterministically, so any prefix of the file is varied.
    random.Random(SEED + 1).shuffle(out)
    return out


def ood_problem(rng: random.Random) -> Problem:
    """Larger operands than the training data's (2-3 digits): four and five digits, a 3-4 digit multiplicand."""
    op = rng.choice(sorted(OOD_TEMPLATES))
    if op == "*":
        a, b = rng.randint(100, 9999), rng.randint(2, 9)
    else:
        a, b = rng.randint(1000, 99999), rng.randint(1000, 99999)
        if op == "-" and b > a:
            a, b = b, a
    return Problem(a, op, b, rng.choice(OOD_TEMPLATES[op]).format(a=a, b=b))


def ood_rows() -> list[dict]:
    rng = random.Random(OOD_SEED)
    out = []
    for i in range(OOD_ROWS):
        problem = ood_problem(rng)
        system = OOD_SYSTEM_PROMPTS[i % len(OOD_SYSTEM_PROMPTS)]
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": problem.question}
        ]
        out.append(
            {
                "id": f"ood-{i:03d}",
                "messages": messages,
                "group": problem_group(problem),
                "metadata": {"task": "arithmetic", "expected": problem.result, "system_prompt": system is not None},
            }
        )
    return out


def write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in lines:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


def main() -> None:
    write(OUT, rows())
    write(OOD_OUT, ood_rows())


if __name__ == "__main__":
    main()
