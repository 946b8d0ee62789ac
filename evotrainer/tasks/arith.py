"""Multi-digit integer arithmetic: the simplest task whose answers can be checked exactly.

``37+58=`` -> ``95``. A chat model is asked ``What is 37+58? Answer with the number only.``; its final answer in
prose is the last integer it writes (``Verdict.final_correct``), while strict correctness wants the number alone.
Difficulty is the number of digits of each operand, so a curriculum can start where a
tiny character-level policy succeeds and move up. The reference answer is computed by folding the generated
operands and operators with ordinary precedence in plain integer arithmetic; nothing is ever ``eval``-ed.
"""

from __future__ import annotations

import itertools
import random
import re

from pydantic import Field, field_validator

from evotrainer.tasks.base import Problem, Task, TaskOptions, Verdict

_OPS = "+-*"
_ANSWER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_INTEGER = re.compile(r"-?[0-9]+")


class ArithOptions(TaskOptions):
    """Options of the ``arith`` task."""

    ops: str = Field(
        default="+-",
        min_length=1,
        max_length=3,
        description="Operators to draw from, a non-empty subset of '+-*' (each at most once).",
    )
    n_operands: int = Field(
        default=2,
        ge=2,
        le=3,
        description="Operands per problem; with several operators '*' binds tighter than '+' and '-'.",
    )

    @field_validator("ops")
    @classmethod
    def _ops_subset(cls, ops: str) -> str:
        unknown = sorted(set(ops) - set(_OPS))
        if unknown:
            raise ValueError(f"{''.join(unknown)!r} not among '+-*'")
        if len(set(ops)) != len(ops):
            raise ValueError("each operator may appear only once")
        return ops


def _fold(operands: list[int], ops: list[str]) -> int:
    """Value of ``operands[0] ops[0] operands[1] ...`` with ``*`` before ``+``/``-``, left to right."""
    terms = [operands[0]]
    signs = [1]
    for op, operand in zip(ops, operands[1:]):
        if op == "*":
            terms[-1] *= operand
        else:
            terms.append(operand)
            signs.append(1 if op == "+" else -1)
    return sum(sign * term for sign, term in zip(signs, terms))


def _operand_range(difficulty: int) -> tuple[int, int]:
    return (0 if difficulty == 1 else 10 ** (difficulty - 1)), 10**difficulty - 1


def _canonical(literal: str) -> str:
    """``'-007'`` -> ``'-7'`` and ``'-0'`` -> ``'0'``, without ``int()`` (which rejects huge input)."""
    negative = literal.startswith("-")
    digits = literal.lstrip("-").lstrip("0") or "0"
    return "-" + digits if negative and digits != "0" else digits


class ArithTask(Task):
    """Integer addition, subtraction and multiplication of multi-digit operands."""

    name = "arith"
    description = "Integer arithmetic: '37+58=' -> '95'; answers are integers, possibly negative."
    difficulty_doc = "digits per operand (level 1 also includes 0)"
    min_difficulty = 1
    max_difficulty = 6
    default_difficulty = 3
    Options = ArithOptions

    options: ArithOptions
    chat_system = "You are a calculator. Reply with the number only."

    def chat_messages(self, problem: Problem) -> list[dict[str, str]]:
        """A chat model is asked ``What is 37+58? Answer with the number only.`` under a calculator system prompt."""
        return [{"role": "system", "content": self.chat_system},
                {"role": "user", "content": f"What is {problem.prompt.rstrip('=')}? Answer with the number only."}]

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        self.check_difficulty(difficulty)
        low, high = _operand_range(difficulty)
        operands = [rng.randint(low, high) for _ in range(self.options.n_operands)]
        ops = [rng.choice(self.options.ops) for _ in range(self.options.n_operands - 1)]
        expression = str(operands[0]) + "".join(op + str(x) for op, x in zip(ops, operands[1:]))
        result = _fold(operands, ops)
        return Problem(
            id=f"arith:{expression}",
            prompt=f"{expression}=",
            answer=str(result),
            difficulty=difficulty,
            meta={"operands": operands, "ops": ops, "result": result},
        )

    def verify(self, problem: Problem, completion: str) -> Verdict:
        reference = _canonical(str(problem.meta.get("result", problem.answer)))
        text = completion.strip()
        literals = _INTEGER.findall(completion)
        well_formed = _ANSWER.fullmatch(text) is not None and text != "-0"
        correct = well_formed and text == reference
        if correct:
            reason = ""
        elif not text:
            reason = "empty completion"
        elif not well_formed:
            reason = "not a single integer"
        else:
            reason = "wrong value"
        return Verdict(
            correct=correct,
            well_formed=well_formed,
            contains_answer=any(_canonical(lit) == reference for lit in literals),
            n_candidates=len(literals),
            parsed=text if well_formed else None,
            reason=reason,
            # prose: the last integer is the final answer ('12 + 35 = 47.', 'The answer is 47')
            final_correct=bool(literals) and _canonical(literals[-1]) == reference,
        )

    def max_answer_chars(self, difficulty: int) -> int:
        """Exact: the expression is multilinear in its operands, so its extremes lie at the range corners."""
        self.check_difficulty(difficulty)
        low, high = _operand_range(difficulty)
        n = self.options.n_operands
        longest = 0
        for ops in itertools.product(self.options.ops, repeat=n - 1):
            for corner in itertools.product((low, high), repeat=n):
                longest = max(longest, len(str(_fold(list(corner), list(ops)))))
        return longest
