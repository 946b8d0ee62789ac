"""Tests for evotrainer.tasks: splits, sampling, verifiers, the safe parser and the registry.

Reward is only as trustworthy as the verifier, and evaluation only as honest as the train/held-out split, so
these tests pin both down, plus the errors a user sees when naming or configuring a task wrongly.
"""

from __future__ import annotations

import random
import textwrap
from fractions import Fraction

import pytest
from pydantic import ValidationError

from evotrainer.core.errors import ConfigError, TaskError
from evotrainer.tasks import (
    BUILTIN_TASKS,
    ArithTask,
    CountdownTask,
    Problem,
    Task,
    Verdict,
    get_task,
    list_tasks,
    parse_task_options,
)
from evotrainer.tasks.base import stable_unit
from evotrainer.tasks.safe_expr import (
    MAX_CHARS,
    MAX_DEPTH,
    BinOp,
    ExprError,
    Neg,
    Num,
    evaluate,
    literals,
    parse,
    to_text,
)
from tests.conftest import junk_texts

TASK_CONFIGS = [
    ("arith", {}),
    ("arith", {"ops": "+"}),
    ("arith", {"ops": "-"}),
    ("arith", {"ops": "*"}),
    ("arith", {"ops": "+-*", "n_operands": 3}),
    ("arith", {"ops": "*-", "n_operands": 3}),
    ("countdown", {}),
    ("countdown", {"use_all": True}),
    ("countdown", {"max_number": 5, "max_target": 10}),
    ("countdown", {"max_number": 100, "max_target": 10, "use_all": True}),
    ("countdown", {"max_number": 100, "max_target": 10000}),
]


def _ids(problems: list[Problem]) -> set[str]:
    return {p.id for p in problems}


def _full_range(task: Task) -> tuple[int, int]:
    return task.min_difficulty, task.max_difficulty


# -- splits and sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_TASKS))
@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_train_and_heldout_are_disjoint_and_labelled(name: str, seed: int) -> None:
    task = get_task(name)
    train = task.sample("train", 200, seed=seed, difficulty_range=_full_range(task))
    heldout = task.sample("heldout", 200, seed=seed, difficulty_range=_full_range(task))
    assert len(train) == 200 and len(heldout) == 200
    assert len(_ids(train)) == 200 and len(_ids(heldout)) == 200  # no duplicates
    assert _ids(train).isdisjoint(_ids(heldout))
    assert all(task.split_of(p) == "train" for p in train)
    assert all(task.split_of(p) == "heldout" for p in heldout)
    assert {p.difficulty for p in train} == set(range(task.min_difficulty, task.max_difficulty + 1))


@pytest.mark.parametrize("name", sorted(BUILTIN_TASKS))
def test_heldout_ids_never_appear_in_train_of_any_seed(name: str) -> None:
    task = get_task(name)
    heldout = _ids(task.sample("heldout", 300, seed=0, difficulty_range=(task.min_difficulty,) * 2))
    for seed in range(1, 6):
        train = task.sample("train", 300, seed=seed, difficulty_range=(task.min_difficulty,) * 2)
        assert _ids(train).isdisjoint(heldout)


@pytest.mark.parametrize("name", sorted(BUILTIN_TASKS))
def test_sampling_is_deterministic_per_seed_and_differs_across_seeds(name: str) -> None:
    task = get_task(name)
    first = task.sample("train", 50, seed=3)
    again = get_task(name).sample("train", 50, seed=3)
    other = task.sample("train", 50, seed=4)
    assert first == again
    assert [p.id for p in first] != [p.id for p in other]
    assert len(_ids(first) & _ids(other)) < 25
    assert task.sample("train", 80, seed=3)[:50] == first  # a larger n extends a smaller one
    assert all(p.difficulty == task.default_difficulty for p in first)


def test_split_depends_only_on_the_id() -> None:
    plus, mixed = get_task("arith", {"ops": "+"}), get_task("arith", {"ops": "+-*"})
    for problem in plus.sample("train", 100, seed=0) + plus.sample("heldout", 100, seed=0):
        assert mixed.split_of(problem) == plus.split_of(problem)
        twin = Problem(id=problem.id, prompt="x=", answer="1", difficulty=1)
        assert plus.split_of(twin) == plus.split_of(problem)


def test_same_problem_has_same_id_across_seeds() -> None:
    task = get_task("arith", {"ops": "+"})
    by_prompt: dict[str, str] = {}
    for seed in range(5):
        for p in task.sample("train", 60, seed=seed, difficulty_range=(1, 1)):
            assert by_prompt.setdefault(p.prompt, p.id) == p.id
            assert p.id == "arith:" + p.prompt.removesuffix("=")


def test_heldout_fraction_is_about_a_fifth() -> None:
    task = get_task("arith")
    rng = random.Random(0)
    problems = {p.id: p for p in (task.generate(rng, 4) for _ in range(4000))}
    share = sum(task.split_of(p) == "heldout" for p in problems.values()) / len(problems)
    assert 0.17 < share < 0.23


def test_too_small_space_returns_every_problem_of_the_split_once() -> None:
    task = get_task("arith", {"ops": "+"})
    expected = {f"arith:{a}+{b}" for a in range(10) for b in range(10) if stable_unit(f"arith:{a}+{b}") < 0.2}
    got = task.sample("heldout", 100, seed=0, difficulty_range=(1, 1))
    assert 0 < len(got) < 100
    assert len(_ids(got)) == len(got)  # no duplicates
    assert _ids(got) == expected
    assert len(task.sample("train", 500, seed=1, difficulty_range=(1, 1))) == 100 - len(expected)


def test_sample_rejects_bad_arguments() -> None:
    task = get_task("arith")
    for bad_range in [(0, 3), (4, 2), (1, 7), (2,), "12"]:
        with pytest.raises(TaskError, match="difficulty range"):
            task.sample("train", 5, seed=0, difficulty_range=bad_range)  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="1 <= low <= high <= 6"):
        task.sample("train", 5, seed=0, difficulty_range=(0, 3))
    with pytest.raises(TaskError, match="'test'"):
        task.sample("test", 5, seed=0)  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="-1"):
        task.sample("train", -1, seed=0)
    with pytest.raises(TaskError, match="difficulty 9 is not allowed.*1..6"):
        task.generate(random.Random(0), 9)
    with pytest.raises(TaskError, match="difficulty 1 is not allowed.*2..5"):
        get_task("countdown").generate(random.Random(0), 1)
    assert task.sample("train", 0, seed=0) == []


# -- every generated answer verifies -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options"), TASK_CONFIGS)
def test_generated_answers_verify_at_every_level(name: str, options: dict) -> None:
    task = get_task(name, options)
    for level in range(task.min_difficulty, task.max_difficulty + 1):
        problems = task.sample("train", 25, seed=level, difficulty_range=(level, level))
        problems += task.sample("heldout", 10, seed=level, difficulty_range=(level, level))
        assert problems
        for p in problems:
            assert p.difficulty == level
            assert all(" " <= ch <= "~" for ch in p.prompt)
            for text in (p.answer, f"  {p.answer}\n"):
                verdict = task.verify(p, text)
                assert verdict.correct and verdict.well_formed and verdict.contains_answer, (p, verdict)
                assert verdict.n_candidates == 1
                assert verdict.reason == ""
            assert len(p.answer) <= task.max_answer_chars(level)


@pytest.mark.parametrize("options", [c[1] for c in TASK_CONFIGS if c[0] == "arith"])
def test_arith_reference_matches_an_independent_evaluation(options: dict) -> None:
    task = get_task("arith", options)
    rng = random.Random(5)
    for _ in range(300):
        p = task.generate(rng, rng.randint(1, 6))
        assert p.prompt.endswith("=")
        assert evaluate(parse(p.prompt[:-1])) == int(p.answer)
        operands = literals(parse(p.prompt[:-1]))
        low = 0 if p.difficulty == 1 else 10 ** (p.difficulty - 1)
        assert all(low <= x < 10**p.difficulty for x in operands)
        assert len(operands) == task.options.n_operands
        assert set(p.prompt[:-1]) - set("0123456789") <= set(task.options.ops)


def test_arith_max_answer_chars_is_exact() -> None:
    assert get_task("arith", {"ops": "+"}).max_answer_chars(1) == 2  # 9+9=18
    assert get_task("arith", {"ops": "-"}).max_answer_chars(2) == 3  # 10-99=-89
    assert get_task("arith", {"ops": "*", "n_operands": 3}).max_answer_chars(6) == 18
    assert get_task("arith", {"ops": "-*", "n_operands": 3}).max_answer_chars(1) == 3  # 0-9*9=-81


@pytest.mark.parametrize("use_all", [False, True])
def test_countdown_problems_follow_their_rules(use_all: bool) -> None:
    task = get_task("countdown", {"use_all": use_all, "max_target": 50})
    rng = random.Random(2)
    for _ in range(200):
        p = task.generate(rng, rng.randint(2, 5))
        numbers, target = p.meta["numbers"], p.meta["target"]
        assert p.prompt == " ".join(map(str, numbers)) + f">{target}:"
        assert len(numbers) == p.difficulty and numbers == sorted(numbers)
        assert all(1 <= x <= 20 for x in numbers) and 1 <= target <= 50
        used = sorted(literals(parse(p.answer)))
        if use_all:
            assert used == numbers
        else:
            assert target not in numbers  # no trivial one-number solutions
            assert len(used) >= 2
        assert " " not in p.answer


# -- arith verifier ---------------------------------------------------------------------------------------


def _arith(expression: str) -> Problem:
    expr = parse(expression)
    operands = literals(expr)
    ops = [ch for ch in expression if ch in "+-*"]
    result = int(evaluate(expr))
    return Problem(
        id=f"arith:{expression}",
        prompt=f"{expression}=",
        answer=str(result),
        difficulty=3,
        meta={"operands": operands, "ops": ops, "result": result},
    )


def test_arith_rejects_wrong_and_malformed_completions() -> None:
    task, p = ArithTask(), _arith("37+58")
    assert task.verify(p, "95").correct
    for text in [
        "96",
        "94",
        "-95",
        "095",
        "+95",
        "9 5",
        "95.0",
        "95 96",
        "95=",
        "ninety-five",
        "",
        "   ",
        "0x5f",
    ]:
        verdict = task.verify(p, text)
        assert not verdict.correct, text
    assert task.verify(p, "96").well_formed
    assert task.verify(p, "-95").well_formed
    for text in ["095", "+95", "9 5", "95.0", "95=", "", "-0", "--95", "1e2"]:
        assert not task.verify(p, text).well_formed, text
    assert task.verify(p, "96").parsed == "96"
    assert task.verify(p, "9 5").parsed is None


def test_arith_negative_and_zero_results() -> None:
    task = ArithTask()
    negative = _arith("37-58")
    assert negative.answer == "-21"
    assert task.verify(negative, "-21").correct
    verdict = task.verify(negative, "21")
    assert not verdict.correct and verdict.well_formed and not verdict.contains_answer
    zero = _arith("5-5")
    assert task.verify(zero, "0").correct
    minus_zero = task.verify(zero, "-0")
    assert not minus_zero.well_formed and not minus_zero.correct and minus_zero.contains_answer


def test_arith_spraying_is_detected_but_leniently_credited() -> None:
    task, p = ArithTask(), _arith("37+58")
    spray = task.verify(p, "12 95 7")
    assert spray.contains_answer and not spray.correct and not spray.well_formed
    assert spray.n_candidates == 3
    miss = task.verify(p, "12 96 7")
    assert not miss.contains_answer and miss.n_candidates == 3
    assert task.verify(p, "the answer is 95").contains_answer
    assert task.verify(p, "0095").contains_answer
    assert task.verify(p, "no digits").n_candidates == 0
    assert task.verify(p, "95").n_candidates == 1


def test_arith_precedence_when_mixing() -> None:
    task = ArithTask({"ops": "+-*", "n_operands": 3})
    p = _arith("2+3*4")
    assert p.answer == "14"
    assert task.verify(p, "14").correct and not task.verify(p, "20").correct
    assert _arith("10-2*3").answer == "4" and _arith("2*3-10").answer == "-4"


# -- countdown verifier -----------------------------------------------------------------------------------


def _countdown(numbers: list[int], target: int, use_all: bool = False) -> Problem:
    shown = " ".join(map(str, sorted(numbers)))
    return Problem(
        id=f"countdown:{shown}>{target}",
        prompt=f"{shown}>{target}:",
        answer="",
        difficulty=len(numbers),
        meta={"numbers": sorted(numbers), "target": target, "use_all": use_all},
    )


def test_countdown_accepts_any_valid_solution() -> None:
    task, p = CountdownTask(), _countdown([3, 5, 7], 22)
    for text in ["3*5+7", "7+3*5", "(5*3)+7", " 7 + 5 * 3 ", "3\u00d75+7", "-(-(3*5))+7"]:
        verdict = task.verify(p, text)
        assert verdict.correct and verdict.well_formed, text
    assert task.verify(p, "(5*3)+7").parsed == "5*3+7"
    assert task.verify(_countdown([2, 8, 7], 3), "(7\u2212(2\u00f78))\u00f7(7/8)").well_formed


def test_countdown_rejects_rule_breaking_completions() -> None:
    task, p = CountdownTask(), _countdown([3, 5, 7], 22)
    cases = {
        "5*5-3": "uses 5 2 times",  # reuse
        "3*7+1": "uses 1, which is not a given number",  # not given
        "22": "uses 22",  # the target itself is not a given number
        "3+5+7": "value 15 is not the target 22",  # wrong target
        "7/(5-5)": "uses 5 2 times",
    }
    for text, reason in cases.items():
        verdict = task.verify(p, text)
        assert not verdict.correct and verdict.well_formed, text
        assert reason in verdict.reason, (text, verdict.reason)
    for text in ["3*5+", "3**5", "3*5+7 = 22", "abc", "", "3 5 7", "(3*5+7", "3*5+7)", "__import__('os')"]:
        verdict = task.verify(p, text)
        assert not verdict.correct and not verdict.well_formed, text
        assert verdict.parsed is None


def test_countdown_division_by_zero_is_not_correct_and_does_not_raise() -> None:
    task, p = CountdownTask(), _countdown([2, 5, 5], 10)
    verdict = task.verify(p, "2/(5-5)")
    assert verdict.well_formed and not verdict.correct and not verdict.contains_answer
    assert "division by zero" in verdict.reason
    assert task.verify(p, "2*5").correct
    assert task.verify(p, "5+5").correct  # a number given twice may be used twice


def test_countdown_use_all_requires_every_number_exactly_once() -> None:
    task = CountdownTask()
    loose, strict = _countdown([3, 5, 7], 15), _countdown([3, 5, 7], 15, use_all=True)
    assert task.verify(loose, "3*5").correct
    verdict = task.verify(strict, "3*5")
    assert not verdict.correct and "missing 7" in verdict.reason
    assert not task.verify(strict, "3*5+7-7").correct
    assert task.verify(strict, "(7-5+3)*3").correct is False  # 3 used twice
    assert task.verify(_countdown([3, 5, 7], 36, use_all=True), "(7-5)*3*6").correct is False
    assert task.verify(_countdown([3, 5, 7], 2, use_all=True), "7-5").correct is False  # 3 unused
    assert task.verify(_countdown([3, 5, 7], 6, use_all=True), "(7-5)*3").correct
    assert task.verify(_countdown([3, 5, 7], 13, use_all=True), "(7-5)*5+3").correct is False  # 5 twice
    assert task.verify(strict, "3+5+7").correct and task.verify(strict, "7*(5-3)+1").correct is False


def test_countdown_candidates_and_lenient_credit() -> None:
    task, p = CountdownTask(), _countdown([3, 5, 7], 22)
    spray = task.verify(p, "3*5+7, 22")
    assert spray.n_candidates == 2 and spray.contains_answer and not spray.correct
    assert task.verify(p, "3 5 7").n_candidates == 3
    assert task.verify(p, "3 + 5 * 7").n_candidates == 1
    assert task.verify(p, "1+2; 3*5+7 x").contains_answer
    assert task.verify(p, "3*5+7; 3*5").n_candidates == 2
    assert not task.verify(p, "22 22 22").contains_answer  # spraying the target earns nothing
    assert task.verify(p, "").n_candidates == 0


@pytest.mark.parametrize(
    ("name", "options"), [("arith", {}), ("countdown", {}), ("countdown", {"use_all": True})]
)
def test_verifiers_never_raise_on_junk(name: str, options: dict) -> None:
    task = get_task(name, options)
    alphabet = "0123456789+-*/()= ,;.xe_\n\t\u2212\u00d7\u00f7a'"
    problems = task.sample("train", 10, seed=0)
    for i, text in enumerate(junk_texts(alphabet, 400, short=25, long=300)):
        verdict = task.verify(problems[i % len(problems)], text)
        assert isinstance(verdict, Verdict)
        assert not verdict.correct or verdict.well_formed


# -- safe expression parser -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("2*3+4", 10),
        ("1-2-3", -4),
        ("8/4/2", 1),
        ("7/2", Fraction(7, 2)),
        ("-2*3", -6),
        ("2*-3", -6),
        ("--2", 2),
        ("-(2+3)", -5),
        ("2-(-3)", 5),
        ("10-2*3+4/2", 6),
        (" ( 1 + 2 ) * ( 3 - 4 ) ", -3),
        ("6\u00f73\u00d72\u22121", 3),
        ("000012", 12),
    ],
)
def test_safe_expr_evaluates_with_precedence(text: str, value: Fraction | int) -> None:
    assert evaluate(parse(text)) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os')", "unexpected character '_'"),
        ("2**100", "'\\*\\*' \\(power\\)"),
        ("2 * * 3", "expected a number"),
        ("2 \u00d7\u00d7 3", "power"),
        ("abc", "unexpected character 'a'"),
        ("1+x", "unexpected character 'x'"),
        ("(1+2", "missing '\\)'"),
        ("1+2)", "unexpected '\\)'"),
        (")(", "expected a number"),
        ("1+", "ends where a number"),
        ("1 2", "unexpected '2'"),
        ("+1", "expected a number"),
        ("", "empty"),
        ("   ", "empty"),
        ("1.5", "unexpected character '.'"),
        ("2^3", "unexpected character '\\^'"),
        ("1" * 13, "13 digits"),
    ],
)
def test_safe_expr_rejects_malformed_input(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message):
        parse(text)


def test_safe_expr_limits() -> None:
    assert issubclass(ExprError, ValueError)
    ok = "1+" * 99 + "1"
    assert len(ok) == 199 and evaluate(parse(ok)) == 100
    assert evaluate(parse(ok + " ")) == 100  # exactly MAX_CHARS
    with pytest.raises(ExprError, match=f"at most {MAX_CHARS}"):
        parse(ok + "+1")
    deep = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    assert evaluate(parse(deep)) == 1
    with pytest.raises(ExprError, match="deeper than 32"):
        parse("(" + deep + ")")
    with pytest.raises(ExprError, match="deeper than 32"):
        parse("-" * (MAX_DEPTH + 1) + "1")
    with pytest.raises(ExprError, match="deeper than 32"):
        parse("-(" * 17 + "1" + ")" * 17)
    assert evaluate(parse("9" * 12)) == 999999999999
    with pytest.raises(ExprError, match="division by zero"):
        evaluate(parse("1/(2-2)"))
    with pytest.raises(ExprError):
        parse(123)  # type: ignore[arg-type]


def test_safe_expr_tree_and_literals() -> None:
    tree = parse("3-(2*-5)")
    assert tree == BinOp("-", Num(3), BinOp("*", Num(2), Neg(Num(5))))
    assert literals(tree) == [3, 2, 5]
    with pytest.raises(AttributeError):
        tree.op = "+"  # type: ignore[misc]


def _random_tree(rng: random.Random, depth: int) -> BinOp | Num | Neg:
    roll = rng.random()
    if depth == 0 or roll < 0.3:
        return Num(rng.randint(0, 20))
    if roll < 0.4:
        return Neg(_random_tree(rng, depth - 1))
    return BinOp(rng.choice("+-*/"), _random_tree(rng, depth - 1), _random_tree(rng, depth - 1))


def test_to_text_round_trips_the_value() -> None:
    rng = random.Random(4)
    for _ in range(500):
        tree = _random_tree(rng, 4)
        text = to_text(tree)
        assert literals(parse(text)) == literals(tree)
        try:
            expected = evaluate(tree)
        except ExprError:
            with pytest.raises(ExprError):
                evaluate(parse(text))
            continue
        assert evaluate(parse(text)) == expected, text
    assert to_text(parse("(1+2)*(3-(4-5))/(6/7)")) == "(1+2)*(3-(4-5))/(6/7)"
    assert to_text(parse("1+(2+3)")) == "1+2+3"
    assert to_text(parse("(1*2)+3")) == "1*2+3"


# -- registry, options and user tasks ---------------------------------------------------------------------


def test_task_error_is_a_config_error() -> None:
    assert issubclass(TaskError, ConfigError) and TaskError.exit_code == 2


def test_get_task_unknown_name() -> None:
    with pytest.raises(TaskError) as info:
        get_task("arithmetic")
    message = str(info.value)
    assert "'arithmetic'" in message and "arith, countdown" in message and "module:ClassName" in message
    with pytest.raises(TaskError, match="empty"):
        get_task("  ")


def test_get_task_bad_import_paths() -> None:
    with pytest.raises(TaskError, match="module 'no_such_module_zz' was not found"):
        get_task("no_such_module_zz:Task")
    with pytest.raises(TaskError, match="module 'evotrainer.tasks.arith' has no attribute 'NoSuchClass'"):
        get_task("evotrainer.tasks.arith:NoSuchClass")
    with pytest.raises(TaskError, match="'ArithOptions' .* not a subclass of evotrainer.tasks.Task"):
        get_task("evotrainer.tasks.arith:ArithOptions")
    with pytest.raises(TaskError, match="'random' .* not a subclass"):
        get_task("evotrainer.tasks.arith:random")
    with pytest.raises(TaskError, match="abstract.*generate"):
        get_task("evotrainer.tasks.base:Task")
    with pytest.raises(TaskError, match="form 'package.module:ClassName'"):
        get_task("evotrainer.tasks.arith:")
    assert isinstance(get_task("evotrainer.tasks.arith:ArithTask"), ArithTask)


@pytest.mark.parametrize(
    ("name", "options", "fragments"),
    [
        ("arith", {"ops": "+/"}, ["'arith'", "'ops'", "'+/'", "'/'", "+-*"]),
        ("arith", {"ops": "++"}, ["'ops'", "only once"]),
        ("arith", {"ops": ""}, ["'ops'", "''"]),
        ("arith", {"n_operands": 7}, ["'n_operands'", "7", "<= 3"]),
        ("arith", {"n_operands": "two"}, ["'n_operands'", "'two'", "valid integer"]),
        ("arith", {"digits": 3}, ["no option 'digits'", "ops, n_operands"]),
        ("countdown", {"max_number": 1000}, ["'countdown'", "'max_number'", "1000", "<= 100"]),
        ("countdown", {"max_target": 5}, ["'max_target'", ">= 10"]),
        ("countdown", {"use_all": "maybe"}, ["'use_all'", "'maybe'"]),
    ],
)
def test_invalid_options_name_the_option_and_value(name: str, options: dict, fragments: list[str]) -> None:
    with pytest.raises(TaskError) as info:
        get_task(name, options)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_options_from_the_command_line_are_coerced() -> None:
    opts = parse_task_options(["ops=*+", " n_operands = 3"])
    assert opts == {"ops": "*+", "n_operands": "3"}
    task = get_task("arith", opts)
    assert task.options.n_operands == 3 and task.options.ops == "*+"
    assert get_task("countdown", parse_task_options(["use_all=true"])).options.use_all is True
    assert get_task("countdown", parse_task_options(["use_all=0"])).options.use_all is False
    assert parse_task_options(["k=a=b"]) == {"k": "a=b"}
    assert parse_task_options([]) == {}
    with pytest.raises(TaskError, match="'n_operands' must have the form KEY=VALUE"):
        parse_task_options(["n_operands"])
    with pytest.raises(TaskError, match="KEY=VALUE"):
        parse_task_options(["=3"])
    with pytest.raises(TaskError, match="'ops' is given twice"):
        parse_task_options(["ops=+", "ops=-"])
    with pytest.raises(TaskError, match="must be a mapping"):
        ArithTask(["ops=+"])  # type: ignore[arg-type]


def test_options_are_frozen_and_defaults_valid() -> None:
    for cls in BUILTIN_TASKS.values():
        task = cls()
        assert task.Options() == task.options
        with pytest.raises(ValidationError):
            task.options.__setattr__(next(iter(task.Options.model_fields)), 1)


def test_list_tasks_describes_levels_and_options() -> None:
    infos = {info.name: info for info in list_tasks()}
    assert set(infos) == {"arith", "countdown", "code", "agentic"}
    arith = infos["arith"]
    assert (arith.min_difficulty, arith.max_difficulty, arith.default_difficulty) == (1, 6, 3)
    options = {o.name: o for o in arith.options}
    assert options["n_operands"].bounds == {"ge": 2, "le": 3}
    assert options["n_operands"].default == 2 and options["n_operands"].type == "int"
    assert options["ops"].default == "+-" and "+-*" in options["ops"].description
    countdown = infos["countdown"]
    assert (countdown.min_difficulty, countdown.max_difficulty, countdown.default_difficulty) == (2, 5, 3)
    assert {o.name for o in countdown.options} == {"max_number", "max_target", "use_all"}
    assert all(o.description for info in infos.values() for o in info.options)
    assert all(info.difficulty_doc and info.description for info in infos.values())


USER_TASK = '''
"""A user task for the tests: echo a number back."""
import random

from pydantic import Field

from evotrainer.tasks import Problem, Task, TaskOptions, Verdict


class EchoOptions(TaskOptions):
    width: int = Field(default=2, ge=1, le=4, description="digits")


class Echo(Task):
    name = "echo"
    description = "Repeat the number."
    difficulty_doc = "unused"
    min_difficulty = 1
    max_difficulty = 2
    default_difficulty = 1
    Options = EchoOptions

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        n = str(rng.randint(0, 10 ** self.options.width - 1))
        return Problem(id=f"echo:{n}", prompt=f"{n}>", answer=n, difficulty=difficulty)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        ok = completion.strip() == problem.answer
        return Verdict(correct=ok, well_formed=ok, contains_answer=problem.answer in completion,
                       n_candidates=1, parsed=completion.strip() if ok else None)


class NotATask:
    pass


class Broken(Echo):
    min_difficulty = 3


class Unicode(Echo):
    def generate(self, rng, difficulty):
        return Problem(id="u:1", prompt="1\u00d72=", answer="2", difficulty=difficulty)
'''


def test_user_task_loads_from_a_module_path(tmp_path, monkeypatch) -> None:
    (tmp_path / "evo_user_tasks_ok.py").write_text(textwrap.dedent(USER_TASK))
    monkeypatch.syspath_prepend(str(tmp_path))
    task = get_task("evo_user_tasks_ok:Echo", parse_task_options(["width=3"]))
    assert task.name == "echo" and task.options.width == 3
    problems = task.sample("train", 20, seed=0)
    assert len(problems) == 20 and all(task.verify(p, p.answer).correct for p in problems)
    assert task.max_answer_chars(1) == 3  # the generic estimate from generated answers
    assert task.info().options[0].bounds == {"ge": 1, "le": 4}
    with pytest.raises(TaskError, match="'echo'.*'width' = 9"):
        get_task("evo_user_tasks_ok:Echo", {"width": 9})
    with pytest.raises(TaskError, match="'NotATask' .* not a subclass"):
        get_task("evo_user_tasks_ok:NotATask")
    with pytest.raises(TaskError, match="default_difficulty 1 is outside 3..2"):
        get_task("evo_user_tasks_ok:Broken")
    # any Unicode prompt is a valid problem; only the character-level policies refuse it (before training)
    uni = get_task("evo_user_tasks_ok:Unicode")
    assert [p.prompt for s in ("train", "heldout") for p in uni.sample(s, 1, seed=0)] == ["1\u00d72="]


def test_user_module_that_fails_to_import(tmp_path, monkeypatch) -> None:
    (tmp_path / "evo_user_tasks_bad.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "evo_user_tasks_dep.py").write_text("import evo_missing_dependency_zz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskError, match="importing module 'evo_user_tasks_bad' failed: RuntimeError: boom"):
        get_task("evo_user_tasks_bad:Task")
    with pytest.raises(
        TaskError, match="importing module 'evo_user_tasks_dep' failed.*evo_missing_dependency_zz"
    ):
        get_task("evo_user_tasks_dep:Task")


# -- boundary models --------------------------------------------------------------------------------------


def test_problem_is_frozen_and_takes_any_unicode_prompt() -> None:
    p = _arith("1+2")
    with pytest.raises(ValidationError):
        p.prompt = "3+4="  # type: ignore[misc]
    for text in ["1\u00d72=", "1+2\n=", "tab\t", "数字で答えて"]:
        assert Problem(id="x", prompt=text, answer="2", difficulty=1).prompt == text
    with pytest.raises(ValidationError):
        Problem(id="x", prompt="", answer="2", difficulty=1)


def test_verdict_correct_implies_well_formed() -> None:
    with pytest.raises(ValidationError, match="well_formed"):
        Verdict(correct=True, well_formed=False, contains_answer=True, n_candidates=1)
    with pytest.raises(ValidationError):
        Verdict(correct=False, well_formed=False, contains_answer=False, n_candidates=-1)
