"""Countdown: reach a target from given numbers with + - * / and parentheses.

Unlike ``arith`` there are many right answers, so the verifier checks the *rules* (only the given numbers,
each at most once, or exactly once with ``use_all``) and the exact value, through the safe parser in
:mod:`evotrainer.tasks.safe_expr` - never ``eval``. Every problem is generated from an expression that is
known to work, which also serves as the canonical answer for the SFT warm start.
"""

from __future__ import annotations

import random
import re
from collections import Counter

from pydantic import Field

from evotrainer.core.errors import TaskError
from evotrainer.tasks.base import Problem, Task, TaskOptions, Verdict
from evotrainer.tasks.safe_expr import BinOp, Expr, ExprError, Num, evaluate, literals, parse, to_text

_MAX_RESTARTS = 1000
# Anything that cannot be part of an expression separates candidates (commas, ';', '=', letters, ...).
_NOT_EXPR = re.compile(r"[^0-9+\-*/()\s\u2212\u00d7\u00f7]+")
# Inside a run of expression characters, whitespace between the end of one operand and the start of the
# next ("12 95", "(1+2) (3)") separates two candidates; whitespace next to an operator ("3 + 5") does not.
_GAP = re.compile(r"(?<=[0-9)])\s+(?=[0-9(])")


class CountdownOptions(TaskOptions):
    """Options of the ``countdown`` task."""

    max_number: int = Field(
        default=20, ge=5, le=100, description="Given numbers are drawn from 1..max_number."
    )
    max_target: int = Field(
        default=200,
        ge=10,
        le=10000,
        description="Largest target; every intermediate of the generating expression is in 1..max_target.",
    )
    use_all: bool = Field(
        default=False,
        description="False: each given number may be used at most once; True: exactly once.",
    )


def _candidates(completion: str) -> list[str]:
    """The candidate expressions in ``completion``, e.g. ``'3*5+7, 22'`` -> ``['3*5+7', '22']``."""
    found = []
    for chunk in _NOT_EXPR.split(completion):
        for part in _GAP.split(chunk):
            part = part.strip()
            if any(ch.isdigit() for ch in part):
                found.append(part)
    return found


def _fault(expr: Expr, numbers: list[int], target: int, use_all: bool) -> str:
    """Why ``expr`` does not solve the problem, or ``''`` if it does."""
    used, given = Counter(literals(expr)), Counter(numbers)
    for number, count in used.items():
        if number not in given:
            return f"uses {number}, which is not a given number"
        if count > given[number]:
            return f"uses {number} {count} times but it is given {given[number]} time(s)"
    if use_all and used != given:
        missing = sorted((given - used).elements())
        return f"does not use every given number (missing {' '.join(map(str, missing))})"
    try:
        value = evaluate(expr)
    except ExprError as exc:
        return str(exc)
    if value != target:
        return f"value {value} is not the target {target}"
    return ""


class CountdownTask(Task):
    """Combine the given numbers with + - * / and parentheses to hit the target exactly."""

    name = "countdown"
    description = (
        "Countdown: '3 5 7>22:' -> an expression such as '3*5+7' using the given numbers to make 22."
    )
    difficulty_doc = "how many numbers are given"
    min_difficulty = 2
    max_difficulty = 5
    default_difficulty = 3
    Options = CountdownOptions

    options: CountdownOptions
    chat_system = "Reply with one arithmetic expression only, nothing else."

    def chat_messages(self, problem: Problem) -> list[dict[str, str]]:
        """A chat model is asked ``Using the numbers 3 5 7 (each at most once) and + - * / with parentheses, write
        an expression that equals 22. Answer with the expression only.``"""
        each = "each exactly once" if problem.meta.get("use_all") else "each at most once"
        shown = " ".join(map(str, problem.meta["numbers"]))
        return [{"role": "system", "content": self.chat_system},
                {"role": "user", "content": f"Using the numbers {shown} ({each}) and + - * / with parentheses, write "
                                            f"an expression that equals {problem.meta['target']}. Answer with the "
                                            "expression only."}]

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        self.check_difficulty(difficulty)
        opts = self.options
        for _ in range(_MAX_RESTARTS):
            numbers = [rng.randint(1, opts.max_number) for _ in range(difficulty)]
            size = difficulty if opts.use_all else rng.randint(2, difficulty)
            built = self._combine(rng, [numbers[i] for i in rng.sample(range(difficulty), size)])
            if built is None:
                continue
            expr, target = built
            if not opts.use_all and target in numbers:
                continue  # one given number would already be a (trivial) solution
            numbers.sort()
            answer = to_text(expr)
            shown = " ".join(map(str, numbers))
            assert evaluate(parse(answer)) == target  # internal invariant, not input validation
            return Problem(
                id=f"countdown:{shown}>{target}" + ("|all" if opts.use_all else ""),
                prompt=f"{shown}>{target}:",
                answer=answer,
                difficulty=difficulty,
                meta={"numbers": numbers, "target": target, "use_all": opts.use_all},
            )
        raise TaskError(
            f"task 'countdown' could not generate a level-{difficulty} problem with "
            f"max_number={opts.max_number}, "
            f"max_target={opts.max_target}, use_all={opts.use_all} in {_MAX_RESTARTS} tries; "
            "raise max_target or lower the difficulty"
        )

    def _combine(self, rng: random.Random, leaves: list[int]) -> tuple[Expr, int] | None:
        """Randomly combine ``leaves`` pairwise into one expression, every intermediate in 1..max_target."""
        limit = self.options.max_target
        items: list[tuple[Expr, int]] = [(Num(x), x) for x in leaves]
        while len(items) > 1:
            pairs = [(i, j) for i in range(len(items)) for j in range(len(items)) if i != j]
            rng.shuffle(pairs)
            for i, j in pairs:
                (left, a), (right, b) = items[i], items[j]
                options = []
                if a + b <= limit:
                    options.append(("+", a + b))
                if a > b and a - b <= limit:
                    options.append(("-", a - b))
                if a * b <= limit:
                    options.append(("*", a * b))
                if b > 1 and a % b == 0 and a // b <= limit:
                    options.append(("/", a // b))
                if options:
                    op, value = rng.choice(options)
                    items = [item for k, item in enumerate(items) if k not in (i, j)]
                    items.append((BinOp(op, left, right), value))
                    break
            else:
                return None
        expr, value = items[0]
        return (expr, value) if 1 <= value <= limit else None

    def verify(self, problem: Problem, completion: str) -> Verdict:
        numbers = list(problem.meta["numbers"])
        target = problem.meta["target"]
        use_all = bool(problem.meta.get("use_all", self.options.use_all))
        candidates = _candidates(completion)
        contains = False
        for candidate in candidates:
            try:
                if not _fault(parse(candidate), numbers, target, use_all):
                    contains = True
                    break
            except ExprError:
                continue
        # prose: the final answer is the last candidate that is not the bare target ('3*5+7 = 22.' reads 3*5+7)
        final = [c for c in candidates if c.strip() != str(target)]
        try:
            final_ok = bool(final) and not _fault(parse(final[-1]), numbers, target, use_all)
        except ExprError:
            final_ok = False
        try:
            expr = parse(completion.strip())
        except ExprError as exc:
            return Verdict(
                correct=False,
                well_formed=False,
                contains_answer=contains,
                n_candidates=len(candidates),
                reason=f"not an expression: {exc}",
                final_correct=final_ok,
            )
        fault = _fault(expr, numbers, target, use_all)
        return Verdict(
            correct=not fault,
            well_formed=True,
            contains_answer=contains or not fault,
            n_candidates=len(candidates),
            parsed=to_text(expr),
            reason=fault,
            final_correct=final_ok or not fault,
        )

    def max_answer_chars(self, difficulty: int) -> int:
        """Upper bound on canonical answers: all ``difficulty`` numbers at full width, ``difficulty - 1``
        operators, and at most one pair of parentheses around each non-root operation."""
        self.check_difficulty(difficulty)
        width = len(str(self.options.max_number))
        return difficulty * width + (difficulty - 1) + 2 * max(0, difficulty - 2)
