"""Synthetic arithmetic: the task the embedded tiny verifier is trained on and the demo set asks.

One module owns the question phrasings so the demo prompts and the verifier's training data stay in
the same distribution; :func:`worked_solution` is the verifier's own (step-by-step) style, and
:func:`textbook_answer` a different, terse style used as the demo set's "original" answers (the
static-data baseline).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

OPERATIONS = ("+", "-", "*")
OPERATION_WORDS = {"+": "plus", "-": "minus", "*": "times"}

QUESTION_TEMPLATES = (
    "What is {a} {op} {b}?",
    "Compute {a} {op} {b}.",
    "Calculate {a} {op} {b}.",
    "What is {a} {word} {b}?",
    "Please work out {a} {op} {b}.",
    "Solve {a} {op} {b}.",
)


@dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int
    question: str

    @property
    def result(self) -> int:
        if self.op == "+":
            return self.a + self.b
        if self.op == "-":
            return self.a - self.b
        return self.a * self.b


def problem_group(problem: Problem) -> str:
    """The problem a question asks, whatever its wording: operator and operands (commutative operands
    sorted, so "3 * 12" and "12 * 3" are one problem). Demo rows carry it as their split ``group``."""
    a, b = sorted((problem.a, problem.b)) if problem.op in "+*" else (problem.a, problem.b)
    return f"arithmetic:{a}{problem.op}{b}"


def make_problem(rng: random.Random) -> Problem:
    """A random two-operand problem with a phrasing drawn from :data:`QUESTION_TEMPLATES`."""
    op = rng.choice(OPERATIONS)
    if op == "*":
        a, b = rng.randint(2, 99), rng.randint(2, 9)
    else:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        if op == "-" and b > a:
            a, b = b, a
    template = rng.choice(QUESTION_TEMPLATES)
    return Problem(a, op, b, template.format(a=a, op=op, b=b, word=OPERATION_WORDS[op]))


def _digits(n: int) -> list[int]:
    return [int(d) for d in reversed(str(n))]


def worked_solution(problem: Problem) -> tuple[str, str]:
    """The verifier's style: (thinking, answer). Column-wise steps, then one answer sentence."""
    a, op, b = problem.a, problem.op, problem.b
    steps: list[str] = []
    if op == "+":
        steps.append(f"We need {a} + {b}. Add column by column from the right.")
        da, db, carry = _digits(a), _digits(b), 0
        for i in range(max(len(da), len(db))):
            x = da[i] if i < len(da) else 0
            y = db[i] if i < len(db) else 0
            total = x + y + carry
            steps.append(f"{x} + {y} + {carry} = {total}, write {total % 10}, carry {total // 10}.")
            carry = total // 10
        if carry:
            steps.append(f"Write the last carry {carry}.")
    elif op == "-":
        steps.append(f"We need {a} - {b}. Subtract column by column from the right.")
        da, db, borrow = _digits(a), _digits(b), 0
        for i in range(len(da)):
            x = da[i] - borrow
            y = db[i] if i < len(db) else 0
            borrow = 1 if x < y else 0
            steps.append(f"{x + 10 * borrow} - {y} = {x + 10 * borrow - y}, borrow {borrow}.")
    else:
        steps.append(f"We need {a} * {b}. Multiply each digit of {a} by {b} from the right.")
        carry = 0
        for x in _digits(a):
            total = x * b + carry
            steps.append(f"{x} * {b} + {carry} = {total}, write {total % 10}, carry {total // 10}.")
            carry = total // 10
        if carry:
            steps.append(f"Write the last carry {carry}.")
    steps.append(f"So {a} {op} {b} = {problem.result}.")
    return "\n".join(steps), f"The answer is {problem.result}."


def textbook_answer(problem: Problem, rng: random.Random) -> str:
    """A terse human answer in a style unlike the verifier's (the dataset's 'original' response)."""
    style = rng.randrange(3)
    word = OPERATION_WORDS[problem.op]
    if style == 0:
        return f"{problem.a} {word} {problem.b} equals {problem.result}."
    if style == 1:
        return f"Sure! {problem.a} {problem.op} {problem.b} = {problem.result}"
    return f"It's {problem.result}."
