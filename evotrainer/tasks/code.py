"""Program synthesis from input/output examples, judged by hidden tests.

``[3,1,2]>[1,2,3];[5,4,4]>[4,4,5];[7,0]>[0,7]:`` -> ``sort``. The policy sees a few examples of a hidden
ListLang program (see :mod:`evotrainer.tasks.listlang`) and writes a program; the verifier runs it with our
own interpreter (step, size and magnitude limits; never ``exec``) on *hidden* test inputs that the prompt does
not show, and the reward is the fraction of them passed (``Verdict.score``). Strict correctness is passing
every hidden test.

Why hidden tests: a program judged on the examples it was shown can simply hard-code them
(``[3,1,2]>[1,2,3]|[5,4,4]>[4,4,5]|...``). The harness keeps that variant as a TRAP for demonstrating gates:
``reward.correctness.tests: visible`` pays ``Verdict.visible_score`` (the examples in the prompt) instead, and
the ``hardcoding`` diagnostic catches the programs it breeds.

Difficulty is the number of composed stages (1..5). Every problem is generated from a reference program that
is non-degenerate on its examples (each stage changes something, and the examples' outputs are all different)
and on its hidden tests (no output stands for more than a quarter of them, see :func:`max_repeats`), so a
constant program - ``[]`` or ``0``, which a policy finds first - earns at most a quarter of the reward and is
never correct. Before that rule the best constant averaged 0.23-0.37 of the hidden tests and passed all of them
on ~0.5 % of level 2-5 problems. The reference is the canonical answer for the SFT warm start. The
problem id is the reference program and the visible inputs; the hidden inputs are drawn from a generator
seeded by that id, so a problem is the same under every seed, and the train/held-out split hashes the id as
in every task (held-out problems may share a program with train ones, never its examples).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from typing import Any, ClassVar

from pydantic import Field, model_validator

from evotrainer.core.errors import TaskError
from evotrainer.tasks.base import Problem, Task, TaskOptions, Verdict, stable_unit
from evotrainer.tasks.listlang import (
    DEFAULT_MAX_STEPS,
    ListLangError,
    Program,
    RunResult,
    Stage,
    Value,
    as_value,
    format_value,
    parse,
    parse_value,
    run,
)

_MAX_RESTARTS = 2000
_MAX_CANDIDATE_RUNS = 16  # candidates tried for the lenient `contains_answer`
_CHUNKS = re.compile(r"[\n;]")
_EXAMPLE = re.compile(r"(\[[-0-9,]*\]|-?[0-9]+)>(\[[-0-9,]*\]|-?[0-9]+)")

# What the generator composes (the language has more: dup, constants and cases are never in a reference).
_MAP_ARGS = {"+": range(1, 10), "-": range(1, 10), "*": range(2, 5), "/": range(2, 5), "%": range(2, 6)}
_KEEP_ARGS = {">": range(0, 9), "<": range(1, 10)}
_LIST_OPS = ("map", "map", "keep", "even", "odd", "sort", "rev", "uniq", "take", "drop")
_SCALAR_OPS = ("sum", "max", "min", "len")
_TAKE_ARGS = range(1, 4)
_DROP_ARGS = range(1, 3)
_LONGEST_STAGE = max(
    *(len(f"map{sym}{max(args)}") for sym, args in _MAP_ARGS.items()),
    *(len(f"keep{sym}{max(args)}") for sym, args in _KEEP_ARGS.items()),
    len(f"take{max(_TAKE_ARGS)}"), len(f"drop{max(_DROP_ARGS)}"), *(len(op) for op in _LIST_OPS + _SCALAR_OPS),
)


class CodeOptions(TaskOptions):
    """Options of the ``code`` task."""

    n_visible: int = Field(default=3, ge=2, le=5, description="Input/output examples shown in the prompt.")
    n_hidden: int = Field(default=8, ge=1, le=32, description="Hidden test inputs the reward is computed on.")
    min_len: int = Field(default=2, ge=1, le=8, description="Shortest input list.")
    max_len: int = Field(default=6, ge=2, le=10, description="Longest input list.")
    max_value: int = Field(default=9, ge=5, le=99, description="Input items are drawn from 0..max_value.")
    max_steps: int = Field(
        default=DEFAULT_MAX_STEPS, ge=100, le=1_000_000, description="Interpreter step budget per test run."
    )
    hardcode_probe_share: float = Field(
        default=0.0, ge=0.0, le=0.5,
        description="Share of warm-start examples whose answer is the first visible example's output as a "
                    "constant (a hard-coded program, as a pretrained model would sometimes write), so that a run "
                    "under the trap `reward.correctness.tests: visible` can discover hard-coding. Hidden tests "
                    "pay such a program almost nothing. 0 = the reference program always.",
    )

    LATE_OPTIONS: ClassVar[dict[str, Any]] = {"hardcode_probe_share": 0.0}

    @model_validator(mode="after")
    def _lengths(self) -> CodeOptions:
        if self.min_len > self.max_len:
            raise ValueError(f"min_len={self.min_len} is above max_len={self.max_len}")
        return self


def prompt_examples(prompt: str) -> list[tuple[Value, Value]] | None:
    """The visible (input, output) examples of a ``code`` prompt, or None if ``prompt`` is not one.

    Diagnostics use it to read the examples back from rollout records, which store only the prompt text.
    """
    if not prompt.endswith(":"):
        return None
    parts = prompt[:-1].split(";")
    out = []
    for part in parts:
        m = _EXAMPLE.fullmatch(part)
        if m is None:
            return None
        try:
            out.append((parse_value(m.group(1)), parse_value(m.group(2))))
        except ListLangError:
            return None
    return out or None


def _random_stage(rng: random.Random, last: bool, previous: Stage | None) -> Stage:
    while True:
        if last and rng.random() < 0.3:
            return Stage(rng.choice(_SCALAR_OPS))
        op = rng.choice(_LIST_OPS)
        if op == "map":
            sym = rng.choice(list(_MAP_ARGS))
            stage = Stage("map", sym=sym, arg=rng.choice(_MAP_ARGS[sym]))
        elif op == "keep":
            sym = rng.choice(list(_KEEP_ARGS))
            stage = Stage("keep", sym=sym, arg=rng.choice(_KEEP_ARGS[sym]))
        elif op == "take":
            stage = Stage("take", arg=rng.choice(_TAKE_ARGS))
        elif op == "drop":
            stage = Stage("drop", arg=rng.choice(_DROP_ARGS))
        else:
            stage = Stage(op)
        # two stages of one kind in a row fold into one (sort|sort, map+1|map+2) or undo each other (rev|rev)
        if previous is None or stage.op != previous.op:
            return stage


def max_repeats(n: int) -> int:
    """How many of ``n`` tests may share one output: a quarter, at least one (so ``[]`` cannot farm reward)."""
    return max(1, n // 4)


def _same(result: RunResult, expected: Value) -> bool:
    return result.ok and result.value == expected


class CodeTask(Task):
    """Write a ListLang program that maps the example inputs to their outputs; judged on hidden tests."""

    name = "code"
    shows_tests = True
    description = (
        "Program synthesis: '[3,1,2]>[1,2,3];[5,4]>[4,5]:' -> a ListLang program such as 'sort', "
        "scored by the fraction of hidden tests it passes."
    )
    difficulty_doc = "number of composed stages of the reference program"
    min_difficulty = 1
    max_difficulty = 5
    default_difficulty = 2
    Options = CodeOptions

    options: CodeOptions
    chat_system = "You write ListLang programs. Reply with the program only."
    chat_language = ("ListLang: stages joined by |. map+N map-N map*N map/N map%N keep>N keep<N even odd sort rev uniq "
                     "dup takeN dropN sum max min len. A list or number alone is a constant; A>B is a case.")
    """What a chat model is told of the language: every stage, in as few tokens as will do (a pretrained model has
    never seen ListLang, and on a CPU each prompt token costs every step; ~160 SmolLM2 tokens with the chat template and the examples)."""

    def chat_messages(self, problem: Problem) -> list[dict[str, str]]:
        """A chat model gets the language in one line, the examples one per line (``[3,1,2] -> [1,2,3]``), and the
        request for the program alone, which the strict verifier parses as a whole."""
        shown = "\n".join(f"{format_value(as_value(x))} -> {format_value(as_value(y))}"
                          for x, y in problem.meta["visible"])
        return [{"role": "system", "content": self.chat_system},
                {"role": "user", "content": f"{self.chat_language}\nWrite a program that turns each input into its "
                                            f"output:\n{shown}\nAnswer with the program only."}]

    # -- generation ------------------------------------------------------------------------------------
    def _input(self, rng: random.Random) -> tuple[int, ...]:
        o = self.options
        return tuple(rng.randint(0, o.max_value) for _ in range(rng.randint(o.min_len, o.max_len)))

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        self.check_difficulty(difficulty)
        o = self.options
        for _ in range(_MAX_RESTARTS):
            stages: list[Stage] = []
            for i in range(difficulty):
                stages.append(_random_stage(rng, i == difficulty - 1, stages[-1] if stages else None))
            program = Program(tuple(stages))
            inputs = [self._input(rng) for _ in range(o.n_visible)]
            if len(set(inputs)) < len(inputs):
                continue
            results = [run(program, x, o.max_steps) for x in inputs]
            if not all(r.ok for r in results):
                continue
            outputs: list[Value] = [r.value for r in results]  # type: ignore[misc]
            if not self._informative(program, inputs, outputs):
                continue
            text = program.text
            shown = ";".join(format_value(x) for x in inputs)
            problem_id = f"code:{text}|{shown}"
            hidden = self._hidden(problem_id, program, inputs)
            if hidden is None:
                continue
            examples = ";".join(f"{format_value(x)}>{format_value(y)}" for x, y in zip(inputs, outputs))
            return Problem(
                id=problem_id,
                prompt=f"{examples}:",
                answer=text,
                difficulty=difficulty,
                meta={
                    "program": text,
                    "visible": [[_jsonable(x), _jsonable(y)] for x, y in zip(inputs, outputs)],
                    "hidden": [[_jsonable(x), _jsonable(y)] for x, y in hidden],
                },
            )
        raise TaskError(
            f"task 'code' could not generate a level-{difficulty} problem in {_MAX_RESTARTS} tries with "
            f"options {o.model_dump()}; widen the input lengths or values"
        )

    def warm_start_answer(self, problem: Problem) -> str:
        if stable_unit(f"hardcode-probe|{problem.id}") < self.options.hardcode_probe_share:
            return format_value(_tests(problem.meta["visible"])[0][1])  # see hardcode_probe_share
        return problem.answer

    def _informative(self, program: Program, inputs: list[tuple[int, ...]], outputs: list[Value]) -> bool:
        """No two outputs are equal (a constant passes at most one), and no stage can be left out without
        changing some output (so the level counts stages that matter)."""
        if max(Counter(outputs).values()) > max_repeats(len(outputs)):
            return False
        for k in range(len(program.stages)):
            shorter = Program(program.stages[:k] + program.stages[k + 1 :])  # no stages: the identity
            if all(_same(run(shorter, x, self.options.max_steps), y) for x, y in zip(inputs, outputs)):
                return False
        return True

    def _hidden(self, problem_id: str, program: Program, visible: list[tuple[int, ...]]):
        """``n_hidden`` (input, output) tests on fresh inputs, drawn from a generator seeded by the id; an input
        whose output already stands for :func:`max_repeats` of them is skipped, and a program that cannot fill
        the tests that way (one that is nearly constant) gives None, so the generator draws another."""
        rng = random.Random(int.from_bytes(hashlib.sha256(f"hidden|{problem_id}".encode()).digest()[:8], "big"))
        tests: list[tuple[Value, Value]] = []
        seen = set(visible)
        repeats: Counter[Value] = Counter()
        cap = max_repeats(self.options.n_hidden)
        for _ in range(50 * self.options.n_hidden):
            x = self._input(rng)
            if x in seen:
                continue
            result = run(program, x, self.options.max_steps)
            if result.ok and repeats[result.value] < cap:  # type: ignore[index]
                repeats[result.value] += 1  # type: ignore[index]
                seen.add(x)
                tests.append((x, result.value))  # type: ignore[arg-type]
                if len(tests) == self.options.n_hidden:
                    return tests
        return None

    # -- verification ----------------------------------------------------------------------------------
    def verify(self, problem: Problem, completion: str) -> Verdict:
        hidden = _tests(problem.meta.get("hidden", []))
        visible = _tests(problem.meta.get("visible", []))
        max_steps = self.options.max_steps
        chunks = [c.strip() for c in _CHUNKS.split(completion) if c.strip()] if isinstance(completion, str) else []
        candidates = []
        for chunk in chunks:
            try:
                candidates.append(parse(chunk))
            except ListLangError:
                continue
        contains = any(_passed(c, hidden, max_steps)[0] == len(hidden) for c in candidates[:_MAX_CANDIDATE_RUNS])
        try:
            program = parse(completion.strip())
        except (ListLangError, AttributeError) as exc:
            return Verdict(
                correct=False, well_formed=False, contains_answer=contains, n_candidates=len(candidates),
                reason=f"not a program: {exc}", score=0.0, visible_score=0.0,
            )
        passed, failure = _passed(program, hidden, max_steps)
        shown, _ = _passed(program, visible, max_steps)
        correct = bool(hidden) and passed == len(hidden)
        return Verdict(
            correct=correct,
            well_formed=True,
            contains_answer=contains or correct,
            n_candidates=len(candidates),
            parsed=program.text,
            reason="" if correct else f"passes {passed} of {len(hidden)} hidden tests; {failure}",
            score=passed / len(hidden) if hidden else 0.0,
            visible_score=shown / len(visible) if visible else 0.0,
        )

    def max_answer_chars(self, difficulty: int) -> int:
        """Upper bound on canonical answers: ``difficulty`` of the longest stage the generator writes, and the bars."""
        self.check_difficulty(difficulty)
        return difficulty * _LONGEST_STAGE + difficulty - 1


def _jsonable(value: Value) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _tests(raw: Any) -> list[tuple[Value, Value]]:
    if isinstance(raw, str):
        raw = json.loads(raw)
    return [(as_value(x), as_value(y)) for x, y in raw]


def _passed(program: Program, tests: list[tuple[Value, Value]], max_steps: int) -> tuple[int, str]:
    """How many ``tests`` the program passes, and a description of the first failure."""
    passed, failure = 0, ""
    for x, expected in tests:
        result = run(program, x, max_steps)
        if result.ok and result.value == expected:
            passed += 1
        elif not failure:
            got = format_value(result.value) if result.ok else str(result.error)  # type: ignore[arg-type]
            failure = f"first failure: {format_value(x)} gave {got}, expected {format_value(expected)}"
    return passed, failure
