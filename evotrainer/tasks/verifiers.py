"""Verifiers for a user's task: how a completion is judged against a row's answer, by libraries where one exists.

A dataset or a reasoning-gym task has no answer format of its own, so its verifier is chosen by name:

- ``exact``: the stripped completion equals the stripped answer;
- ``numeric``: a number equal to the answer within ``tolerance`` (absolute, or relative to the answer's size);
- ``math``: Hugging Face's ``math-verify`` (LaTeX, fractions, ``\\boxed{}``, ``0.5`` against ``\\frac{1}{2}``);
- ``reasoning_gym``: the dataset's own ``score_answer`` (partial credit in [0, 1]);
- ``MODULE:FN``: a user function ``(completion, row) -> float in [0, 1]``.

Each keeps the two readings the diagnostics compare: strict ``correct`` (the completion is the answer alone) and
lenient ``final_correct`` (the final answer read from prose is right), so the reward/correctness gap works on a
user's task as on the built-in ones. A verifier never raises: a judge that fails on a completion scores it 0 and
says why in ``Verdict.reason`` (``verifier raised ...``), which the rollout records.
"""

from __future__ import annotations

import importlib
import math
import numbers
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from evotrainer.core.errors import TaskError
from evotrainer.tasks.base import Verdict

VERIFIER_ERROR = "verifier raised"
"""How ``Verdict.reason`` begins when the judge itself failed (the rollout's ``verifier_error`` column)."""

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")

Judge = Callable[[str, str, Mapping[str, Any]], Verdict]


def _wrong(reason: str, well_formed: bool = False, contains: bool = False, final: bool | None = False,
           n: int = 0, score: float | None = None) -> Verdict:
    return Verdict(correct=False, well_formed=well_formed, contains_answer=contains, n_candidates=n,
                   reason=reason, final_correct=final, score=score)


def exact(completion: str, answer: str, row: Mapping[str, Any]) -> Verdict:
    """The stripped completion is the stripped answer; its last non-empty line is the lenient reading."""
    c, a = completion.strip(), answer.strip()
    lines = [ln.strip() for ln in c.splitlines() if ln.strip()]
    final = bool(lines) and lines[-1].removesuffix(".").strip() == a
    contains = bool(a) and a in c
    if c == a:
        return Verdict(correct=True, well_formed=True, contains_answer=True, n_candidates=1, parsed=c,
                       final_correct=True)
    return _wrong(f"expected {a!r}", well_formed=len(lines) == 1, contains=contains, final=final,
                  n=int(contains))


def _to_float(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numeric(tolerance: float) -> Judge:
    """A number within ``tolerance`` of the answer: absolute below 1, relative to the answer above."""

    def judge(completion: str, answer: str, row: Mapping[str, Any]) -> Verdict:
        target = _to_float(answer.strip())
        if target is None:
            raise ValueError(f"the answer {answer!r} is not a number")
        close = lambda v: abs(v - target) <= tolerance * max(1.0, abs(target))  # noqa: E731
        found = [v for v in (_to_float(m) for m in _NUMBER.findall(completion)) if v is not None]
        whole = _to_float(completion.strip())
        final = bool(found) and close(found[-1])
        contains = any(close(v) for v in found)
        if whole is not None and close(whole):
            return Verdict(correct=True, well_formed=True, contains_answer=True, n_candidates=1,
                           parsed=completion.strip(), final_correct=True)
        return _wrong(f"expected {answer.strip()} (within {tolerance:g})", well_formed=whole is not None,
                      contains=contains, final=final, n=len(found))

    return judge


def _unwrap(text: str) -> str:
    t = text.strip().removesuffix(".").strip()
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if t.startswith(left) and t.endswith(right) and len(t) >= len(left) + len(right):
            t = t[len(left) : len(t) - len(right)].strip()
    if t.startswith("\\boxed{") and t.endswith("}"):
        t = t[len("\\boxed{") : -1].strip()
    return t.replace(" ", "")


def math_verify(completion: str, answer: str, row: Mapping[str, Any]) -> Verdict:
    """``math-verify``: the gold answer and the completion's final answer parsed and compared symbolically.
    Strict: the completion is that answer alone (``$...$`` and ``\\boxed{}`` allowed around it)."""
    from math_verify import parse, verify

    # math-verify bounds its work with SIGALRM, which exists only in the main thread; elsewhere it runs unbounded
    main = threading.current_thread() is threading.main_thread()
    t = 5 if main else None
    gold = parse(answer if "$" in answer or "\\" in answer else f"${answer}$", parsing_timeout=t)
    if not gold:
        raise ValueError(f"math-verify cannot parse the answer {answer!r}")
    pred = parse(completion, parsing_timeout=t)
    if not pred:
        return _wrong("no mathematical answer found", final=False)
    final = bool(verify(gold, pred, timeout_seconds=t))
    strict = final and _unwrap(str(pred[-1])) == _unwrap(completion)
    if strict:
        return Verdict(correct=True, well_formed=True, contains_answer=True, n_candidates=1, parsed=str(pred[-1]),
                       final_correct=True)
    return _wrong(f"expected {answer}", well_formed=_unwrap(str(pred[-1])) == _unwrap(completion), contains=final,
                  final=final, n=1)


def scorer(fn: Callable[[str, Mapping[str, Any]], Any], name: str,
           final_text: Callable[[str], str | None] | None = None) -> Judge:
    """A score in [0, 1] from ``fn(completion, row)``: 1 is correct, less is partial credit. ``final_text`` reads
    the final answer out of prose (reasoning-gym's ``<answer>`` tag) for the lenient reading."""

    def score(text: str, row: Mapping[str, Any]) -> float:
        value = fn(text, row)
        number = float(value) if isinstance(value, numbers.Real) or hasattr(value, "__float__") else math.nan
        if not math.isfinite(number) or not 0.0 <= number <= 1.0:
            raise ValueError(f"{name} returned {value!r}; it must return a number in [0, 1]")
        return number

    def judge(completion: str, answer: str, row: Mapping[str, Any]) -> Verdict:
        s = score(completion, row)
        final: bool | None = None
        if final_text is not None:
            inner = final_text(completion)
            final = s >= 1.0 or (inner is not None and score(inner, row) >= 1.0)
        if s >= 1.0:
            return Verdict(correct=True, well_formed=True, contains_answer=True, n_candidates=1,
                           parsed=completion.strip(), score=1.0, final_correct=final if final is None else True)
        return _wrong(f"{name} scored {s:g}", well_formed=True, contains=s > 0, final=final, n=int(s > 0), score=s)

    return judge


def user_function(path: str) -> Callable[..., Any]:
    """The callable named ``package.module:function``, or a TaskError saying why it cannot be had."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise TaskError(f"'{path}' must have the form 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import-time failure of a user module is reported cleanly
        raise TaskError(f"'{path}': importing module '{module_name}' failed: {type(exc).__name__}: {exc} "
                        "(is its directory on PYTHONPATH?)") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TaskError(f"'{path}': module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TaskError(f"'{path}' is a {type(obj).__name__}, not a function")
    return obj


def resolve(name: str, tolerance: float = 1e-6) -> Judge:
    """The judge a verifier name stands for (``reasoning_gym`` is the reasoning-gym task's own: not here)."""
    if name == "exact":
        return exact
    if name == "numeric":
        return numeric(tolerance)
    if name == "math":
        return math_verify
    if ":" in name:
        fn = user_function(name)
        return scorer(lambda c, row: fn(c, row), name)
    raise TaskError(f"unknown verifier '{name}'; verifiers are exact, numeric, math, or 'package.module:function' "
                    "(a function (completion, row) -> float in [0, 1]); reasoning_gym is a reasoning-gym task's own")


def safe_verdict(judge: Judge, completion: str, answer: str, row: Mapping[str, Any]) -> Verdict:
    """``judge``'s verdict, or a 0 with the reason when the judge raised (a verifier never fails a job)."""
    try:
        return judge(completion, answer, row)
    except Exception as exc:  # noqa: BLE001 - a user's or a library's judge must not take the job down
        return _wrong(f"{VERIFIER_ERROR} {type(exc).__name__}: {str(exc)[:300]}", final=None)
