"""ListLang: the little list-processing language that the ``code`` task's programs are written in.

Why our own language: a program synthesis task must run untrusted model output, and the only code that is
safe to run is code whose every step we wrote. ListLang has no names, no recursion and no loops - a program is
a pipeline of at most ``MAX_STAGES`` stages, each a fixed built-in over a list of integers - so termination is
guaranteed by construction, and the interpreter still charges a step budget and caps list sizes and integer
magnitudes so that no program (``dup|dup|...``, ``map*99|map*99|...``) can take much time or memory. Model text
is parsed by hand here and interpreted by a ``match`` over stage names; nothing is ever ``exec``-ed or
``eval``-ed. It is compact on purpose, so that a tiny character-level policy can write it.

Grammar (whitespace between tokens is ignored; ``INT`` is 0..99 in stage arguments)::

    program := stage ('|' stage)*
    stage   := 'map' ('+'|'-'|'*'|'/'|'%') INT     each x -> x op INT  ('/' floors, '%' is modulo; INT >= 1)
             | 'keep' ('>'|'<') INT               keep the items greater / smaller than INT
             | 'even' | 'odd'                     keep the even / odd items
             | 'sort' | 'rev' | 'uniq' | 'dup'    ascending sort, reverse, drop repeats (first kept), list twice
             | 'take' INT | 'drop' INT            the first INT items / all but the first INT items
             | 'sum' | 'max' | 'min' | 'len'      a list -> a number (max / min of an empty list is an error)
             | value                              a constant: the input is ignored
             | value '>' value                    a case: if the input equals the left value, the right, else
                                                  the input unchanged
    value   := ['-'] digits | '[' [['-'] digits (',' ['-'] digits)*] ']'

Examples: ``sort|take2``, ``map*2|keep>5|sum``, ``even|rev``. Constants and cases exist because real
languages have them, and they are how a policy hard-codes the visible examples (``[1,2]>[2,4]|[5]>[10]``) when
a reward lets it; the ``hardcoding`` diagnostic looks for exactly that.

Errors are values: :func:`parse` raises :class:`ListLangError` (kind ``syntax``, with the 0-based character
position), and :func:`run` returns a :class:`RunResult` whose ``error`` says what went wrong (kinds ``type``,
``runtime``, ``limit``). :func:`run_text` does both and never raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Value = int | tuple[int, ...]
ErrorKind = Literal["syntax", "type", "runtime", "limit"]

MAX_PROGRAM_CHARS = 200
"""Longest program text accepted (characters)."""
MAX_STAGES = 16
"""Most stages in one program."""
MAX_ARG = 99
"""Largest stage argument (``map+INT``, ``take INT``, ...)."""
MAX_INT = 10**6
"""Largest magnitude of any integer a literal or a stage may produce."""
MAX_LIST = 256
"""Longest list a literal or a stage may produce."""
DEFAULT_MAX_STEPS = 10_000
"""Default step budget of one run (a stage over n items costs about n steps; see ``_cost``)."""

MAP_OPS = "+-*/%"
KEEP_OPS = "><"
NULLARY = ("even", "odd", "sort", "rev", "uniq", "dup", "sum", "max", "min", "len")
WITH_ARG = ("take", "drop")
OPERATIONS = ("map", "keep", *NULLARY, *WITH_ARG)
SCALAR_OPS = frozenset({"sum", "max", "min", "len"})


class ListLangError(Exception):
    """A structured error: ``kind``, a message, and where (``position`` in the text or ``stage`` index)."""

    def __init__(self, kind: ErrorKind, message: str, position: int | None = None, stage: int | None = None):
        self.kind, self.message, self.position, self.stage = kind, message, position, stage
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.position is not None:
            where = f" at position {self.position}"
        elif self.stage is not None:
            where = f" in stage {self.stage + 1}"
        return f"{self.kind} error{where}: {self.message}"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage. ``op`` is an operation name, ``"const"`` or ``"case"``."""

    op: str
    sym: str = ""  # the operator of 'map' / 'keep'
    arg: int = 0  # INT of 'map' / 'keep' / 'take' / 'drop'
    value: Value | None = None  # the constant, or the case's result
    key: Value | None = None  # the case's input to match
    position: int = 0  # where the stage starts in the program text

    @property
    def text(self) -> str:
        """Canonical text: no spaces, e.g. ``map+3``, ``take2``, ``[1,2]>[2,4]``."""
        if self.op == "const":
            return format_value(self.value)  # type: ignore[arg-type]
        if self.op == "case":
            return f"{format_value(self.key)}>{format_value(self.value)}"  # type: ignore[arg-type]
        if self.op in ("map", "keep"):
            return f"{self.op}{self.sym}{self.arg}"
        if self.op in WITH_ARG:
            return f"{self.op}{self.arg}"
        return self.op


@dataclass(frozen=True)
class Program:
    stages: tuple[Stage, ...]

    @property
    def text(self) -> str:
        return "|".join(s.text for s in self.stages)


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run: ``value`` when ``ok``, else ``error``; ``steps`` charged either way."""

    value: Value | None
    error: ListLangError | None
    steps: int

    @property
    def ok(self) -> bool:
        return self.error is None


def format_value(value: Value) -> str:
    """``(1, 2)`` -> ``'[1,2]'``, ``7`` -> ``'7'`` (the form prompts and canonical programs use)."""
    if isinstance(value, tuple):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def as_value(obj: object) -> Value:
    """A JSON-decoded value (a list or an int) as a ListLang value."""
    if isinstance(obj, bool):
        raise ValueError(f"{obj!r} is not a ListLang value")
    if isinstance(obj, int):
        return obj
    if isinstance(obj, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in obj):
        return tuple(obj)
    raise ValueError(f"{obj!r} is not a ListLang value (an int or a list of ints)")


# ------------------------------------------------------------------------------------------------ parser


class _Parser:
    def __init__(self, text: str):
        self.text, self.i = text, 0

    # -- scanning ----------------------------------------------------------------------------------------
    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.i] if self.i < len(self.text) else ""

    def found(self) -> str:
        ch = self.peek()
        return "end of program" if not ch else repr(ch)

    def fail(self, message: str, position: int | None = None) -> ListLangError:
        return ListLangError("syntax", message, self.i if position is None else position)

    def word(self) -> tuple[str, int]:
        self.skip()
        start = self.i
        while self.i < len(self.text) and "a" <= self.text[self.i] <= "z":
            self.i += 1
        return self.text[start : self.i], start

    def integer(self, what: str, lo: int, hi: int, signed: bool = False) -> int:
        self.skip()
        start = self.i
        if signed and self.peek() == "-":
            self.i += 1
        digits_at = self.i
        while self.i < len(self.text) and self.text[self.i].isdigit():
            self.i += 1
        if self.i == digits_at:
            raise self.fail(f"expected {what}, found {self.found()}")
        if self.i - digits_at > len(str(MAX_INT)):
            raise self.fail(f"{what} has {self.i - digits_at} digits; it must lie in {lo}..{hi}", start)
        value = int(self.text[start : self.i])
        if not lo <= value <= hi:
            raise self.fail(f"{what} {value} is outside {lo}..{hi}", start)
        return value

    # -- grammar ---------------------------------------------------------------------------------------
    def program(self) -> Program:
        if len(self.text) > MAX_PROGRAM_CHARS:
            raise self.fail(f"program is {len(self.text)} characters long; the limit is {MAX_PROGRAM_CHARS}",
                            MAX_PROGRAM_CHARS)
        if not self.peek():
            raise self.fail("empty program; expected an operation such as 'sort' or 'map+1'")
        stages = [self.stage()]
        while self.peek() == "|":
            self.i += 1
            if len(stages) == MAX_STAGES:
                raise self.fail(f"more than {MAX_STAGES} stages")
            stages.append(self.stage())
        if self.peek():
            raise self.fail(f"expected '|' or the end of the program, found {self.found()}")
        return Program(tuple(stages))

    def stage(self) -> Stage:
        ch = self.peek()
        start = self.i
        if ch == "[" or ch == "-" or ch.isdigit():
            left = self.value()
            if self.peek() == ">":
                self.i += 1
                return Stage("case", key=left, value=self.value(), position=start)
            return Stage("const", value=left, position=start)
        name, start = self.word()
        if not name:
            raise self.fail(f"expected an operation, a number or a list, found {self.found()}")
        if name not in OPERATIONS:
            raise self.fail(f"unknown operation '{name}'; operations are {', '.join(OPERATIONS)}", start)
        if name == "map":
            sym = self.peek()
            if not sym or sym not in MAP_OPS:
                raise self.fail(f"expected one of + - * / % after 'map', found {self.found()}")
            self.i += 1
            at = self.i
            arg = self.integer(f"a number after 'map{sym}'", 0, MAX_ARG)
            if sym in "/%" and arg == 0:
                raise self.fail(f"'map{sym}0' divides by zero; use a number from 1 to {MAX_ARG}", at)
            return Stage("map", sym=sym, arg=arg, position=start)
        if name == "keep":
            sym = self.peek()
            if not sym or sym not in KEEP_OPS:
                raise self.fail(f"expected > or < after 'keep', found {self.found()}")
            self.i += 1
            return Stage("keep", sym=sym, arg=self.integer(f"a number after 'keep{sym}'", 0, MAX_ARG), position=start)
        if name in WITH_ARG:
            return Stage(name, arg=self.integer(f"a number after '{name}'", 0, MAX_ARG), position=start)
        return Stage(name, position=start)

    def value(self) -> Value:
        if self.peek() != "[":
            return self.integer("a number", -MAX_INT, MAX_INT, signed=True)
        start = self.i
        self.i += 1
        items: list[int] = []
        if self.peek() == "]":
            self.i += 1
            return ()
        while True:
            items.append(self.integer("a number in the list", -MAX_INT, MAX_INT, signed=True))
            if len(items) > MAX_LIST:
                raise self.fail(f"list literal has more than {MAX_LIST} items", start)
            ch = self.peek()
            self.i += 1 if ch in (",", "]") else 0
            if ch == "]":
                return tuple(items)
            if ch != ",":
                raise self.fail(f"expected ',' or ']' in the list, found {self.found()}")


def parse(text: str) -> Program:
    """The program in ``text``; raises :class:`ListLangError` (kind ``syntax``, with the position)."""
    if not isinstance(text, str):
        raise ListLangError("syntax", f"a program is text, not {type(text).__name__}", 0)
    return _Parser(text).program()


def parse_value(text: str) -> Value:
    """A value written as in prompts (``'[1,2]'``, ``'-3'``); raises :class:`ListLangError`."""
    p = _Parser(text)
    value = p.value()
    if p.peek():
        raise p.fail(f"unexpected {p.found()} after the value")
    return value


# ------------------------------------------------------------------------------------------------ interpreter


def _cost(stage: Stage, value: Value) -> int:
    """Steps charged for one stage: about one per item it touches (sorting n items: n*ceil(log2 n))."""
    n = len(value) if isinstance(value, tuple) else 1
    if stage.op == "sort":
        return n * max(1, math.ceil(math.log2(n + 1))) + 1
    if stage.op in WITH_ARG:
        return min(stage.arg, n) + 1
    if stage.op == "const":
        return (len(stage.value) if isinstance(stage.value, tuple) else 1) + 1
    if stage.op == "case":
        return (len(stage.key) if isinstance(stage.key, tuple) else 1) + 1
    return n + 1


def _apply(stage: Stage, v: Value, index: int) -> Value:
    op = stage.op
    if op == "const":
        return stage.value  # type: ignore[return-value]
    if op == "case":
        return stage.value if v == stage.key else v  # type: ignore[return-value]
    if not isinstance(v, tuple):
        raise ListLangError("type", f"'{stage.text}' needs a list, got the number {v}", stage=index)
    k = stage.arg
    match op:
        case "map":
            match stage.sym:
                case "+":
                    return tuple(x + k for x in v)
                case "-":
                    return tuple(x - k for x in v)
                case "*":
                    return tuple(x * k for x in v)
                case "/":
                    return tuple(x // k for x in v)
                case _:
                    return tuple(x % k for x in v)
        case "keep":
            return tuple(x for x in v if (x > k if stage.sym == ">" else x < k))
        case "even":
            return tuple(x for x in v if x % 2 == 0)
        case "odd":
            return tuple(x for x in v if x % 2)
        case "sort":
            return tuple(sorted(v))
        case "rev":
            return v[::-1]
        case "uniq":
            return tuple(dict.fromkeys(v))
        case "dup":
            if 2 * len(v) > MAX_LIST:
                raise ListLangError("limit", f"'dup' would make {2 * len(v)} items; the limit is {MAX_LIST}",
                                    stage=index)
            return v + v
        case "take":
            return v[:k]
        case "drop":
            return v[k:]
        case "sum":
            return sum(v)
        case "len":
            return len(v)
        case "max" | "min":
            if not v:
                raise ListLangError("runtime", f"'{op}' of an empty list", stage=index)
            return max(v) if op == "max" else min(v)
    raise ListLangError("runtime", f"unknown operation '{op}'", stage=index)  # unreachable for parsed programs


def _check_size(value: Value, stage: Stage, index: int) -> None:
    items = value if isinstance(value, tuple) else (value,)
    if len(items) > MAX_LIST:
        raise ListLangError("limit", f"'{stage.text}' made {len(items)} items; the limit is {MAX_LIST}", stage=index)
    big = next((x for x in items if abs(x) > MAX_INT), None)
    if big is not None:
        raise ListLangError("limit", f"'{stage.text}' made the value {big}, outside ±{MAX_INT}", stage=index)


def run(program: Program, value: Value, max_steps: int = DEFAULT_MAX_STEPS) -> RunResult:
    """Run ``program`` on ``value`` within ``max_steps``; never raises for any parsed program and value."""
    steps = 0
    items = value if isinstance(value, tuple) else (value,)
    if len(items) > MAX_LIST or any(abs(x) > MAX_INT for x in items):
        err = ListLangError("limit", f"the input must have at most {MAX_LIST} items within ±{MAX_INT}")
        return RunResult(None, err, 0)
    try:
        for index, stage in enumerate(program.stages):
            steps += _cost(stage, value)
            if steps > max_steps:
                raise ListLangError("limit", f"step budget of {max_steps} exceeded at '{stage.text}'", stage=index)
            value = _apply(stage, value, index)
            _check_size(value, stage, index)
    except ListLangError as err:
        return RunResult(None, err, steps)
    return RunResult(value, None, steps)


def run_text(text: str, value: Value, max_steps: int = DEFAULT_MAX_STEPS) -> RunResult:
    """Parse and run in one call: a syntax error comes back in the result too (never raises)."""
    try:
        program = parse(text)
    except ListLangError as err:
        return RunResult(None, err, 0)
    return run(program, value, max_steps)
