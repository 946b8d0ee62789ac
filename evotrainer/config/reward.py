"""The harness's reward section: the built-in terms and the user's TRL reward functions, each with its weight.

Kept apart from :mod:`evotrainer.config.harness` (which holds the recipe as a whole) because the reward composition is
where a user's own code enters a harness: ``reward.functions`` names functions by import path, validated here, imported
by the job (:mod:`evotrainer.training.rewards`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evotrainer.config.section import _Section


class CorrectnessReward(_Section):
    weight: float = Field(1.0, ge=0.0, le=100.0, description="Weight of the correctness reward (1 right, 0 wrong).")
    match: Literal["exact", "final", "contains"] = Field(
        "exact",
        description="'exact': the whole completion must be the right answer. 'final': the final answer the task reads "
        "from prose must be right ('12 + 35 = 47.' reads 47; for chat models that wrap answers in words). "
        "'contains': any occurrence counts — a deliberately lenient variant that invites answer spraying. Strict "
        "correctness is recorded whatever this pays (and the final-answer reading too).",
    )
    tests: Literal["hidden", "visible"] = Field(
        "hidden",
        description="Tests that score a task with partial credit (code; with match 'exact'): 'hidden' pays the "
        "fraction of hidden test cases passed. 'visible' is a TRAP for demonstrating gates: it pays only the "
        "examples shown in the prompt, so a policy can hard-code their outputs (the `hardcoding` diagnostic "
        "catches it). Tasks without visible examples (arith, countdown) score as with 'hidden'.",
    )


class FormatReward(_Section):
    weight: float = Field(0.1, ge=0.0, le=100.0, description="Weight of the format reward (1 if the completion is well-formed).")


class OverlongReward(_Section):
    weight: float = Field(
        0.0, ge=0.0, le=100.0,
        description="Weight of DAPO's soft overlong punishment (0 = off): 0 up to L−buffer, linear to −1 at L, −1 if truncated.",
    )
    buffer: int = Field(4, ge=1, le=16_384, description="Soft-penalty buffer length in tokens (DAPO's L_cache).")


class RepetitionReward(_Section):
    weight: float = Field(
        0.0, ge=0.0, le=100.0, description="Weight of the repetition penalty: −(share of repeated n-grams). 0 = off.",
    )
    ngram: int = Field(3, ge=1, le=32, description="n of the n-grams counted by the repetition penalty.")


class EfficiencyReward(_Section):
    weight: float = Field(
        0.0, ge=0.0, le=100.0,
        description="Weight of the efficiency (length / turn) penalty: −(completion tokens / max_completion_length), "
        "tool observations included, so every turn of a multi-turn episode costs. 0 = off. A TRAP when strong: once "
        "the weight outbids correctness (about 1.5 for a correct `agentic` episode using 2/3 of the budget), an "
        "empty or minimal completion pays best and completions collapse (the `length_collapse` diagnostic catches it).",
    )


BUILTIN_TERMS = ("correctness", "format", "overlong", "repetition", "efficiency")


class UserReward(_Section):
    """One of the user's TRL reward functions as a reward term."""

    fn: str = Field(..., min_length=3, description="'package.module:function', called as TRL calls a reward function: "
                    "fn(prompts=, completions=, completion_ids=, **columns) -> one float (or None) per completion.")
    weight: float = Field(1.0, ge=0.0, le=100.0, description="Weight of the term in the total reward (0 = off).")

    @model_validator(mode="after")
    def _path(self) -> UserReward:
        module, sep, attr = self.fn.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"fn={self.fn!r} must have the form 'package.module:function'")
        return self


def _user_rewards(v: Any) -> Any:
    """``[{fn: m:f, weight: w}, ...]`` (the form a TRL user writes) as ``{f: {fn, weight}}``: keyed by the function's
    name, which TRL logs it under (``rewards/<name>/mean``) and which makes each weight a knob of its own
    (``reward.functions.<name>.weight``)."""
    if not isinstance(v, list):
        return v
    out: dict[str, Any] = {}
    for item in v:
        if not isinstance(item, dict) or not isinstance(item.get("fn"), str):
            raise ValueError(f"each entry of reward.functions is a mapping {{fn: 'package.module:function', weight: W}}, "
                             f"not {item!r}")
        name = item["fn"].rpartition(":")[2].rpartition(".")[2]
        if name in out:
            raise ValueError(f"two reward functions are named '{name}'; TRL logs each under its name, so rename one")
        out[name] = item
    return out


class RewardKnobs(_Section):
    """Reward composition: named terms with weights; each term is logged as `rewards/<term>/mean`."""

    correctness: CorrectnessReward = Field(default_factory=CorrectnessReward, description="Task correctness term.")
    format: FormatReward = Field(default_factory=FormatReward, description="Answer-format term.")
    overlong: OverlongReward = Field(default_factory=OverlongReward, description="Soft overlong punishment term.")
    repetition: RepetitionReward = Field(default_factory=RepetitionReward, description="n-gram repetition term.")
    efficiency: EfficiencyReward = Field(default_factory=EfficiencyReward, description="Length / turn penalty term.")
    functions: dict[str, UserReward] = Field(
        default_factory=dict,
        description="The user's TRL reward functions as terms: a list [{fn: 'module:function', weight: W}, ...] (or a "
        "mapping keyed by the function's name). Each is logged under TRL's name rewards/<name>/mean, recorded per "
        "rollout as reward_<name>, and its weight is the knob reward.functions.<name>.weight. A function that raises, "
        "returns the wrong number of values or NaN fails the job, naming the function and the step.")

    @field_validator("functions", mode="before")
    @classmethod
    def _functions_form(cls, v: Any) -> Any:
        return _user_rewards(v)

    @field_validator("functions")
    @classmethod
    def _functions_names(cls, v: dict[str, UserReward]) -> dict[str, UserReward]:
        for name in v:
            if name in BUILTIN_TERMS or not name.isidentifier():
                raise ValueError(f"reward function name '{name}' must be a Python identifier other than the built-in "
                                 f"terms ({', '.join(BUILTIN_TERMS)})")
        return v


__all__ = ["BUILTIN_TERMS", "RewardKnobs", "UserReward"]
