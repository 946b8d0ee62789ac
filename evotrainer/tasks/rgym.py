"""A task from reasoning-gym: any of its procedural datasets, scored by the dataset's own ``score_answer``.

reasoning-gym (``pip install reasoning-gym``) is a library of generators with verifiers, made for RL on reasoning.
Here a problem is one entry of the named dataset, generated from a seed drawn from the job's random stream, so the
train pool follows the job's seed while the held-out splits, fixed by a hash of the question, stay the same under
every seed (as for the built-in tasks). The entry is regenerated from its seed when it is judged, so the scorer sees
exactly what the generator made (its metadata need not survive JSON).

Levels come from the dataset's curriculum (level L sets every curriculum attribute to its level L-1, as
``set_global_level`` does), or from one config field the user names with its values (``level_field`` and
``levels``). The user's ``config`` is applied on top of the level, so a field set there wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from typing import Any

from pydantic import Field, field_validator, model_validator

from evotrainer.core.errors import TaskError
from evotrainer.tasks import verifiers
from evotrainer.tasks.base import Problem, Task, TaskOptions, Verdict

_ENTRIES: dict[tuple, dict[str, Any]] = {}  # (dataset, config, seed, level) -> entry, per process


def _registry() -> dict[str, tuple[type, type]]:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise TaskError("reasoning-gym is not installed: pip install reasoning-gym (make setup installs it)") from None
    return DATASETS


class ReasoningGymOptions(TaskOptions):
    dataset: str = Field(..., min_length=1, description="A reasoning-gym dataset name, e.g. chain_sum, gcd.")
    config: dict[str, Any] = Field(default_factory=dict, description="Fields of the dataset's config (not seed/size).")
    level_field: str | None = Field(None, description="Config field that sets the level (instead of the curriculum).")
    levels: list[Any] | None = Field(None, description="Values of level_field for levels 1..k.")
    verifier: str = Field("reasoning_gym", min_length=1, description="reasoning_gym (the dataset's scorer), exact, "
                                                                      "numeric, math or 'package.module:function'.")

    @field_validator("config", "levels", mode="before")
    @classmethod
    def _json_text(cls, v: Any) -> Any:  # --task-opt config='{"min_terms": 2}' arrives as text
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                raise ValueError(f"{v!r} is not JSON; give a mapping such as '{{\"min_terms\": 2}}'") from None
        return v

    @model_validator(mode="after")
    def _levels_together(self) -> ReasoningGymOptions:
        if (self.level_field is None) != (self.levels is None):
            raise ValueError("level_field and levels go together: name the config field and its values per level")
        if self.levels is not None and not self.levels:
            raise ValueError("levels must list at least one value")
        return self


class ReasoningGymTask(Task):
    """Entries of a reasoning-gym dataset; see the module docstring."""

    name = "reasoning_gym"
    description = "A reasoning-gym procedural dataset, scored by its own score_answer."
    difficulty_doc = "the dataset's curriculum level (or the values of level_field)"
    min_difficulty = 1
    max_difficulty = 1
    default_difficulty = 1
    Options = ReasoningGymOptions

    def __init__(self, options=None) -> None:
        super().__init__(options)
        o: ReasoningGymOptions = self.options  # type: ignore[assignment]
        registry = _registry()
        if o.dataset not in registry:
            raise TaskError(f"reasoning-gym has no dataset '{o.dataset}'; its datasets are: {', '.join(sorted(registry))}")
        self.dataset_cls, self.config_cls = registry[o.dataset]
        fields = [f.name for f in dataclasses.fields(self.config_cls) if f.name not in ("seed", "size")]
        for key in [*o.config, *([o.level_field] if o.level_field else [])]:
            if key in ("seed", "size"):
                raise TaskError(f"reasoning-gym config key '{key}' is set by EvoTrainer (problems follow the job's "
                                "seed); leave it out")
            if key not in fields:
                raise TaskError(f"reasoning-gym dataset '{o.dataset}' has no config key '{key}'; its keys are: "
                                f"{', '.join(fields)}")
        self.curriculum = None
        if o.level_field is None:
            from reasoning_gym.factory import CURRICULA, create_curriculum

            if o.dataset in CURRICULA:
                self.curriculum = create_curriculum(o.dataset)
        depth = len(o.levels) if o.levels is not None else \
            max((len(a.levels) for a in self.curriculum.attributes.values()), default=1) if self.curriculum else 1
        self.max_difficulty = depth
        self._configs: dict[int, Any] = {}
        self.config_for(1)  # a bad config is refused now, not in the first job
        self._judge = self._scorer() if o.verifier == "reasoning_gym" else verifiers.resolve(o.verifier)

    def _scorer(self):
        from reasoning_gym.utils import extract_answer

        scorer = self.dataset_cls(config=self.config_for(1)).score_answer
        return verifiers.scorer(lambda c, entry: scorer(answer=c, entry=entry), f"{self.options.dataset}.score_answer",
                                final_text=extract_answer)

    def config_for(self, level: int):
        """The dataset's config at ``level`` (seed and size left at their defaults)."""
        if level in self._configs:
            return self._configs[level]
        o: ReasoningGymOptions = self.options  # type: ignore[assignment]
        args: dict[str, Any] = {}
        if self.curriculum is not None:
            self.curriculum.set_global_level(level - 1)
            base = self.curriculum.generate_configuration()
            args = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name not in ("seed", "size")}
        elif o.level_field is not None and o.levels is not None:
            args[o.level_field] = o.levels[level - 1]
        args.update(o.config)
        try:
            cfg = self.config_cls(**args)
            if hasattr(cfg, "validate"):
                cfg.validate()
        except (TypeError, ValueError, AssertionError) as exc:
            raise TaskError(f"reasoning-gym dataset '{o.dataset}' refuses config {args} at level {level}: "
                            f"{type(exc).__name__}: {exc}") from None
        self._configs[level] = cfg
        return cfg

    def entry(self, seed: int, level: int) -> dict[str, Any]:
        """The entry generated from ``seed`` at ``level`` (memoised)."""
        key = (self.options.model_dump_json(), seed, level)
        if key not in _ENTRIES:
            if len(_ENTRIES) >= 50_000:
                _ENTRIES.clear()
            cfg = dataclasses.replace(self.config_for(level), seed=seed, size=1)
            _ENTRIES[key] = self.dataset_cls(config=cfg)[0]
        return _ENTRIES[key]

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        level = self.check_difficulty(difficulty)
        seed = rng.getrandbits(32)
        e = self.entry(seed, level)
        digest = hashlib.sha256(str(e["question"]).encode("utf-8")).hexdigest()[:16]
        return Problem(id=f"{self.options.dataset}:{digest}", prompt=str(e["question"]), answer=str(e["answer"]),
                       difficulty=level, meta={"seed": seed, "level": level})

    def verify(self, problem: Problem, completion: str) -> Verdict:
        def judge(c: str, answer: str, _row) -> Verdict:  # remaking the entry may fail too: safe_verdict says why
            return self._judge(c, answer, self.entry(int(problem.meta["seed"]), int(problem.meta["level"])))

        return verifiers.safe_verdict(judge, completion, problem.answer, {})
