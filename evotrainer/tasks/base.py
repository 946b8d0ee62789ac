"""The contract every task honours: make problems, split them, and verify completions.

Training only trusts reward it can check, so a task is a problem generator plus a strict verifier. This module
fixes the shapes that cross the task boundary (:class:`Problem`, :class:`Verdict`, :class:`TaskInfo`) and puts
everything that must behave identically for every task in one place: option validation with readable errors,
the seed-independent train/held-out split, and deterministic, duplicate-free sampling.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

from evotrainer.core.errors import TaskError

Split = Literal["train", "heldout"]
SPLITS: tuple[str, ...] = ("train", "heldout")

_BOUND_NAMES = ("ge", "gt", "le", "lt", "min_length", "max_length", "multiple_of")


class Problem(BaseModel):
    """One generated problem; immutable, and identified by its content."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(
        min_length=1,
        description="Stable content id, e.g. 'arith:37+58'; the same problem has it under every seed.",
    )
    prompt: str = Field(
        min_length=1, description="Text fed to the policy: any Unicode, newlines included (the built-in character-level "
        "policies take only their alphabet, checked before training: evotrainer.tasks.check_alphabet)."
    )
    answer: str = Field(description="One canonical correct completion (used for the SFT warm start).")
    difficulty: int = Field(description="The task's difficulty level this problem was generated at.")
    meta: dict[str, Any] = Field(default_factory=dict, description="Task-specific data the verifier needs.")


class Verdict(BaseModel):
    """What a verifier concluded about one completion."""

    model_config = ConfigDict(frozen=True)

    correct: bool = Field(description="The stripped completion is well-formed and right.")
    well_formed: bool = Field(description="The whole stripped completion matches the task's answer format.")
    contains_answer: bool = Field(description="A right answer appears somewhere in the completion (lenient).")
    n_candidates: int = Field(ge=0, description="How many candidate answers the completion contains.")
    parsed: str | None = Field(
        default=None, description="The parsed answer, in canonical form, if well-formed."
    )
    reason: str = Field(default="", description="Why the completion is not correct; empty when it is.")
    score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Partial credit in [0, 1] (``code``: the fraction of hidden tests passed), which the "
        "correctness reward pays instead of 1/0; None for all-or-nothing tasks (arith, countdown).",
    )
    visible_score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="The same on the examples shown in the prompt; only paid by the visible-tests TRAP "
        "(``reward.correctness.tests: visible``); None for tasks whose prompts show no examples.",
    )

    final_correct: bool | None = Field(
        default=None,
        description="The final answer read from prose by the task (its last answer-like span, e.g. 47 in 'So 12 + 35 "
        "= 47.') is right: the lenient reading a chat model's reward may pay (``reward.correctness.match: final``); "
        "strict ``correct`` still asks for the answer alone. None when the task reads no final answer.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        if self.correct and self.final_correct is False:
            raise ValueError("a correct verdict's final answer is correct too")
        if self.correct and not (self.well_formed and self.contains_answer):
            raise ValueError("a correct verdict must also be well_formed and contains_answer")
        if self.correct and self.score is not None and self.score < 1.0:
            raise ValueError(f"a correct verdict must have full credit, not score={self.score}")
        return self


class TaskOptions(BaseModel):
    """Base for a task's options: immutable, and unknown option names are errors, not silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    LATE_OPTIONS: ClassVar[dict[str, Any]] = {}
    """Options added after warm-started bases were cached, with the value those bases had: an option at that
    value is left out of the cache key (:func:`evotrainer.training.policy.base_policy_dir`), so they stay valid."""

    def cache_fields(self) -> dict[str, Any]:
        """The options as they key a cached base: every option, except late ones at their old value."""
        late = type(self).LATE_OPTIONS
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in late or v != late[k]}


class NoOptions(TaskOptions):
    """Options of a task that has none."""


class OptionInfo(BaseModel):
    """One option in a task's self-description."""

    name: str
    type: str
    default: Any = None
    required: bool = False
    description: str = ""
    bounds: dict[str, Any] = Field(default_factory=dict, description="e.g. {'ge': 2, 'le': 3}")


class TaskInfo(BaseModel):
    """What a task is, for ``list_tasks`` and the CLI: levels and options, with their documentation."""

    name: str
    description: str
    difficulty_doc: str
    min_difficulty: int
    max_difficulty: int
    default_difficulty: int
    heldout_fraction: float
    options: list[OptionInfo]


def stable_unit(text: str) -> float:
    """A number in [0, 1) fixed by ``text`` alone: the same in every process, seed and Python version."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _type_name(field: FieldInfo) -> str:
    annotation = field.annotation
    return getattr(annotation, "__name__", None) or repr(annotation)


def _bounds(field: FieldInfo) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for item in field.metadata:
        for name in _BOUND_NAMES:
            value = getattr(item, name, None)
            if value is not None:
                bounds[name] = value
    return bounds


def _allowed(field: FieldInfo) -> str:
    words = {
        "ge": ">=",
        "gt": ">",
        "le": "<=",
        "lt": "<",
        "min_length": "length >=",
        "max_length": "length <=",
    }
    parts = [_type_name(field)]
    parts += [f"{words.get(k, k)} {v!r}" for k, v in _bounds(field).items()]
    text = " ".join(parts)
    if field.description:
        text += f" ({field.description})"
    return text


_SAMPLES: dict[tuple, list[Problem]] = {}  # Task.sample results, per process (see Task.sample)


class Task(ABC):
    """A family of verifiable problems. Subclass it, set the class attributes, implement the two methods.

    Class attributes: ``name``, ``description``, ``difficulty_doc`` (one line: what a level means),
    ``min_difficulty`` / ``max_difficulty`` / ``default_difficulty``, ``Options`` (a pydantic model whose
    default instance is valid; subclass :class:`TaskOptions` so unknown names are rejected) and
    ``heldout_fraction`` (share of the problem space reserved for evaluation).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    difficulty_doc: ClassVar[str]
    min_difficulty: ClassVar[int]
    max_difficulty: ClassVar[int]
    default_difficulty: ClassVar[int]
    Options: ClassVar[type[BaseModel]] = NoOptions
    heldout_fraction: ClassVar[float] = 0.2
    raw_prompts: ClassVar[bool] = False
    """True: a chat model gets the raw ``Problem.prompt`` too, never its chat template (see evotrainer.training.prompting)."""
    chat_system: ClassVar[str] = "Reply with the answer only, nothing else."
    """System message of :meth:`chat_messages`'s default."""
    shows_tests: ClassVar[bool] = False
    """True: the prompts show examples that the verdict scores apart (``Verdict.visible_score``), so the harness
    knob ``reward.correctness.tests`` chooses something (``code``); elsewhere visible and hidden tests are one."""

    def __init__(self, options: BaseModel | dict[str, Any] | None = None) -> None:
        type(self)._check_class()
        self.options = self._validate_options(options)

    # -- what subclasses implement -------------------------------------------------------------------------

    @abstractmethod
    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        """One random problem at ``difficulty``; all randomness must come from ``rng``."""

    @abstractmethod
    def verify(self, problem: Problem, completion: str) -> Verdict:
        """Judge ``completion`` for ``problem``. Must never raise for any string: bad text is not correct."""

    def max_answer_chars(self, difficulty: int) -> int:
        """Length of the longest canonical answer at ``difficulty``.

        The trainer warns when ``max_completion_length`` is shorter. Built-in tasks override it (``arith``
        exactly, ``countdown`` as an upper bound). This default only measures 256 generated problems, so it is
        a lower bound; override it when the exact value is known.
        """
        self.check_difficulty(difficulty)
        rng = random.Random(f"max_answer_chars|{self.name}|{difficulty}")
        return max(len(self.generate(rng, difficulty).answer) for _ in range(256))

    def chat_messages(self, problem: Problem) -> list[dict[str, str]]:
        """The prompt for a chat model (a policy whose tokenizer has a chat template; see
        :mod:`evotrainer.training.prompting`): a system message and the user's turn. The default is ``chat_system`` and
        the raw prompt; built-in tasks phrase the problem in words and say what form the answer takes, so that
        an instruct model can answer it and the strict verifier can read the answer alone."""
        return [{"role": "system", "content": self.chat_system}, {"role": "user", "content": problem.prompt}]

    # -- multi-turn tasks (leave these alone for a single-turn task) ----------------------------------------

    def environment(self, leak_tool: bool = False) -> Callable[[], Any] | None:
        """None for a single-turn task. A multi-turn task returns a zero-argument factory of environments, which
        the job hands to TRL as ``environment_factory`` and evaluation plays the same way.

        An environment has ``reset(**row)`` (the dataset row: ``prompt``, ``problem_id``, ``answer``,
        ``difficulty``, ``meta``; returns None or text appended to the prompt), tools (its other public methods,
        type-hinted, with Google-style docstrings), ``get_reward()`` (the episode's correctness reward) and a
        ``verdict`` attribute (the :class:`Verdict` of what the episode submitted; None until it submits).
        ``leak_tool`` adds the task's answer-leaking tool, a TRAP (harness knob ``env.leak_tool``); a task without
        one ignores it.
        """
        return None

    def inert_knobs(self) -> dict[str, str]:
        """Harness knobs that change nothing on this task, with the reason (as ``HarnessSpec.inert_knobs`` says
        for the harness): a proposal of one could only measure noise, or spring a trap that is not there."""
        out = {}
        if self.environment() is None:
            out["env.leak_tool"] = f"task '{self.name}' is single-turn: it has no environment, so no tools"
        if not self.shows_tests:
            out["reward.correctness.tests"] = (f"task '{self.name}' shows no tests in its prompts, so visible and "
                                               "hidden tests are the same")
        return out

    def turn_limit(self) -> int:
        """Most tool calls one episode may make (multi-turn tasks; the environment enforces it too)."""
        return 0

    def warm_start_answer(self, problem: Problem) -> str:
        """What the supervised warm start teaches for a single-turn ``problem``: its reference answer. A task
        may mix in, for a documented share of problems, a behaviour a pretrained model would bring along (the
        ``code`` task's hard-code probe), so that a trap that rewards it can be discovered by RL."""
        return problem.answer

    def demonstration(self, problem: Problem) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls, one per turn, of a successful episode on ``problem`` (the multi-turn warm start plays
        them in ``environment(leak_tool=True)``, so a demonstration may use the leak tool)."""
        raise NotImplementedError(f"task '{self.name}' is single-turn: it has no demonstrations")

    # -- shared behaviour ----------------------------------------------------------------------------------

    def default_range(self) -> tuple[int, int]:
        """The levels a job trains and evaluates on when its harness names none: the default level of a generator
        (a dataset task: all its levels)."""
        return self.default_difficulty, self.default_difficulty

    def split_of(self, problem: Problem) -> Split:
        """``"heldout"`` for a fixed ``heldout_fraction`` of problem ids, ``"train"`` for the rest.

        It depends only on the id's SHA-256, so the two splits are disjoint by construction and the same for
        every seed, run and machine.
        """
        return "heldout" if stable_unit(problem.id) < self.heldout_fraction else "train"

    def sample(
        self,
        split: Split,
        n: int,
        seed: int,
        difficulty_range: tuple[int, int] | None = None,
    ) -> list[Problem]:
        """Up to ``n`` distinct problems (by id) of ``split``, each at a level drawn uniformly from the
        inclusive ``difficulty_range`` (``None`` means the default level only).

        The result depends only on the task options, ``split``, ``seed`` and the range (and a larger ``n``
        only extends a smaller one). Problems are drawn by rejection sampling with a bounded number of
        attempts (at most ``1000 + 50 * n``, and it stops after 2000 draws in a row yield nothing new), so if
        the problem space is too small (e.g. one-digit addition has 100 problems, about a fifth of them held
        out) **fewer than n problems are returned** - never duplicates. Callers that need exactly ``n`` must
        check the length.
        """
        if split not in SPLITS:
            raise TaskError(f"task '{self.name}': split {split!r} is not one of {', '.join(SPLITS)}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TaskError(f"task '{self.name}': number of problems must be an integer >= 0, not {n!r}")
        low, high = self._check_range(difficulty_range)
        # Deterministic in these, so memoised per process: a campaign's worker asks for the same training pool
        # and held-out set in every branch. Problems are frozen; callers get their own list.
        memo = (type(self).__module__, type(self).__qualname__, repr(self.options), split, n, seed, low, high)
        if memo in _SAMPLES:
            return list(_SAMPLES[memo])
        key = f"{self.name}|{split}|{seed}|{low}|{high}"
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big"))
        problems: list[Problem] = []
        seen: set[str] = set()
        max_attempts, max_misses = 1000 + 50 * n, 2000
        attempts = misses = 0
        while len(problems) < n and attempts < max_attempts and misses < max_misses:
            attempts += 1
            problem = self._generate_checked(rng, rng.randint(low, high))
            if problem.id in seen or self.split_of(problem) != split:
                misses += 1
                continue
            misses = 0
            seen.add(problem.id)
            problems.append(problem)
        if len(_SAMPLES) >= 32:
            _SAMPLES.clear()
        _SAMPLES[memo] = problems
        return list(problems)

    def check_difficulty(self, difficulty: int) -> int:
        """``difficulty`` if it is a level of this task, else a :class:`TaskError` naming the levels."""
        if (
            isinstance(difficulty, bool)
            or not isinstance(difficulty, int)
            or not self.min_difficulty <= difficulty <= self.max_difficulty
        ):
            raise TaskError(
                f"task '{self.name}': difficulty {difficulty!r} is not allowed; levels are integers "
                f"{self.min_difficulty}..{self.max_difficulty} ({self.difficulty_doc})"
            )
        return difficulty

    def info(self) -> TaskInfo:
        """This task's self-description, options included."""
        options = []
        for field_name, field in self.Options.model_fields.items():
            required = field.is_required()
            options.append(
                OptionInfo(
                    name=field_name,
                    type=_type_name(field),
                    default=None if required else field.get_default(call_default_factory=True),
                    required=required,
                    description=field.description or "",
                    bounds=_bounds(field),
                )
            )
        return TaskInfo(
            name=self.name,
            description=self.description,
            difficulty_doc=self.difficulty_doc,
            min_difficulty=self.min_difficulty,
            max_difficulty=self.max_difficulty,
            default_difficulty=self.default_difficulty,
            heldout_fraction=self.heldout_fraction,
            options=options,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options!r})"

    # -- internals -----------------------------------------------------------------------------------------

    @classmethod
    def _check_class(cls) -> None:
        label = getattr(cls, "name", None) or cls.__qualname__
        for attr, kind in (
            ("name", str),
            ("description", str),
            ("difficulty_doc", str),
            ("min_difficulty", int),
            ("max_difficulty", int),
            ("default_difficulty", int),
            ("heldout_fraction", float),
        ):
            value = getattr(cls, attr, None)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise TaskError(
                    f"task class {cls.__qualname__} ('{label}') must set {attr} to a {kind.__name__}"
                )
        if not cls.min_difficulty <= cls.default_difficulty <= cls.max_difficulty:
            raise TaskError(
                f"task '{label}': default_difficulty {cls.default_difficulty} is outside "
                f"{cls.min_difficulty}..{cls.max_difficulty}"
            )
        if not 0.0 < cls.heldout_fraction < 1.0:
            raise TaskError(
                f"task '{label}': heldout_fraction {cls.heldout_fraction} must be between 0 and 1"
            )
        if not (isinstance(cls.Options, type) and issubclass(cls.Options, BaseModel)):
            raise TaskError(f"task '{label}': Options must be a pydantic BaseModel class")

    def _validate_options(self, options: BaseModel | dict[str, Any] | None) -> BaseModel:
        if isinstance(options, self.Options):
            return options
        if options is None:
            options = {}
        elif isinstance(options, BaseModel):
            options = options.model_dump()
        elif not isinstance(options, dict):
            raise TaskError(
                f"task '{self.name}': options must be a mapping of option name to value, "
                f"not {type(options).__name__}"
            )
        try:
            return self.Options.model_validate(options)
        except ValidationError as exc:
            raise TaskError(self._options_message(exc)) from None

    def _options_message(self, exc: ValidationError) -> str:
        fields = self.Options.model_fields
        known = ", ".join(fields) or "none"
        problems = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(part) for part in err["loc"])
            top = str(err["loc"][0]) if err["loc"] else ""
            if err["type"] == "extra_forbidden":
                problems.append(f"there is no option '{loc}'; its options are: {known}")
            elif err["type"] == "missing":
                problems.append(f"option '{loc}' is required; allowed: {_allowed(fields[top])}")
            elif top in fields:
                msg = err["msg"].removeprefix("Value error, ")
                problems.append(
                    f"option '{loc}' = {err['input']!r} is invalid: {msg}; allowed: {_allowed(fields[top])}"
                )
            else:
                problems.append(f"options are invalid: {err['msg']}")
        return f"task '{self.name}': " + "; ".join(problems)

    def _check_range(self, difficulty_range: tuple[int, int] | None) -> tuple[int, int]:
        if difficulty_range is None:
            return self.default_difficulty, self.default_difficulty
        try:
            low, high = difficulty_range
        except (TypeError, ValueError):
            raise TaskError(
                f"task '{self.name}': difficulty range {difficulty_range!r} must be a pair (low, high)"
            ) from None
        for level in (low, high):
            if isinstance(level, bool) or not isinstance(level, int):
                raise TaskError(
                    f"task '{self.name}': difficulty range {difficulty_range!r} must hold integer levels"
                )
        if not self.min_difficulty <= low <= high <= self.max_difficulty:
            raise TaskError(
                f"task '{self.name}': difficulty range ({low}, {high}) is not allowed; it must satisfy "
                f"{self.min_difficulty} <= low <= high <= {self.max_difficulty} ({self.difficulty_doc})"
            )
        return low, high

    def _generate_checked(self, rng: random.Random, difficulty: int) -> Problem:
        try:
            problem = self.generate(rng, difficulty)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(map(str, err['loc']))}: {err['msg'].removeprefix('Value error, ')}"
                for err in exc.errors(include_url=False)
            )
            raise TaskError(f"task '{self.name}' generated an invalid problem: {details}") from None
        if not isinstance(problem, Problem):
            raise TaskError(
                f"task '{self.name}': generate() must return a Problem, not {type(problem).__name__}"
            )
        return problem
