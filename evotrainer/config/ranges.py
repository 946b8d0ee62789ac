"""The range a practitioner calls normal for each knob, and where that range comes from.

Why: an expert reads a recipe before spending a step on it, and a value far outside what the field runs (a KL
coefficient of 5, a group of 2, a temperature of 0.2) is a hypothesis worth a backtest on its own. The same ranges
are the space an expert hands a search (Optuna, PBT). They are the field's published practice, never a bench task's
known answer: where the practice depends on the model (the learning rate), the range spans every policy it covers.
``evotrainer harness knobs`` prints them beside each knob's bounds. A knob's *bounds* (config/harness.py) are what
is valid; its normal range is what is usual, narrower.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class NormalRange(BaseModel):
    """What is usual for one knob: a numeric interval (on a log scale when ``log``) or a set of values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float | None = Field(None, description="Lowest usual value (numeric knobs).")
    high: float | None = Field(None, description="Highest usual value (numeric knobs).")
    log: bool = Field(False, description="The usual values span decades: searched and compared in log scale.")
    integer: bool = Field(False, description="The knob takes whole numbers.")
    values: tuple[Any, ...] | None = Field(None, description="The usual values of a categorical or boolean knob.")
    source: str = Field(..., min_length=3, description="Where the range comes from.")

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is usual; None (a knob left unset, such as a symmetric clip's ``epsilon_high``) is."""
        if value is None:
            return True
        if self.values is not None:
            return value in self.values
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high

    def distance(self, value: Any) -> float:
        """How far outside the range ``value`` lies, as a ratio beyond its nearer end minus one (3e-3 against a high
        end of 1e-3 is 2.0; a group of 2 against a low end of 4 is 1.0); 0 inside, 1.0 for a value not among a
        categorical knob's usual ones, inf for 0 below a positive low end."""
        if self.values is not None:
            return 0.0 if value in self.values else 1.0
        if value > self.high:
            return value / self.high - 1 if self.high > 0 else math.inf
        if value < self.low:
            return self.low / value - 1 if value > 0 else math.inf
        return 0.0

    def nearest(self, value: Any) -> Any:
        """The usual value closest to ``value`` (the end of the range it lies beyond)."""
        if self.values is not None:
            return value if value in self.values else self.values[0]
        out = min(max(value, self.low), self.high)
        return int(round(out)) if self.integer else out

    def space(self) -> tuple:
        """The range as a search dimension: ("cat", choices as JSON) or ("log" | "logint" | "float" | "int", low,
        high)."""
        import json

        if self.values is not None:
            return ("cat", [json.dumps(v) for v in self.values])
        kind = ("logint" if self.integer else "log") if self.log else "int" if self.integer else "float"
        return (kind, self.low, self.high)

    def describe(self) -> str:
        if self.values is not None:
            return " | ".join(map(str, self.values))
        return f"{self.low:g}..{self.high:g}" + (" (log)" if self.log else "")


def _r(low: float, high: float, source: str, log: bool = False, integer: bool = False) -> NormalRange:
    return NormalRange(low=low, high=high, log=log, integer=integer, source=source)


def _v(values: tuple[Any, ...], source: str) -> NormalRange:
    return NormalRange(values=values, source=source)


NORMAL: dict[str, NormalRange] = {
    "optim.learning_rate": _r(1e-6, 1e-3, "full fine-tunes of LMs 1e-6..1e-5 (TRL's GRPOConfig default 1e-6), LoRA up "
                                          "to ~5e-4, the built-in tiny policies 1e-4..1e-3", log=True),
    "optim.weight_decay": _r(0.0, 0.1, "TRL's default 0.0; LM fine-tunes use 0.01-0.1 (AdamW, Loshchilov & Hutter)"),
    "optim.max_grad_norm": _r(0.1, 1.0, "TRL's default 1.0; RL recipes clip at 0.1-1.0"),
    "grpo.temperature": _r(0.6, 1.2, "TRL's default 1.0, DAPO 1.0; DeepSeek-R1 and Qwen3 sample at 0.6; ProRL 1.2"),
    "grpo.top_p": _r(0.8, 1.0, "TRL's default 1.0; nucleus sampling is run at 0.9-0.95 (Holtzman et al. 2019)"),
    "grpo.num_generations": _r(4, 16, "TRL's default 8; DAPO 16 (DeepSeekMath 64 at a much larger scale)",
                               integer=True),
    "grpo.beta": _r(0.0, 0.1, "TRL's default 0.0; DeepSeekMath 0.04; DAPO and Dr. GRPO drop the KL term"),
    "grpo.entropy_coef": _r(0.0, 0.02, "0 in most GRPO recipes; Skywork-OR1's adaptive control starts at 5e-3; "
                                       "bonuses of 1e-4..1e-2 are reported"),
    "grpo.entropy_target": _r(0.1, 1.0, "Skywork-OR1 targets 0.2 nats"),
    "grpo.num_iterations": _r(1, 4, "TRL's default 1 (the GRPO paper's mu = 1); PPO-style reuse of 2-4 passes",
                              integer=True),
    "grpo.epsilon": _r(0.1, 0.3, "PPO's and TRL's 0.2"),
    "grpo.epsilon_high": _r(0.2, 0.3, "DAPO's clip-higher 0.28"),
    "grpo.top_entropy_quantile": _r(0.2, 1.0, "1.0 (all tokens, TRL's default); 0.2 in 'Beyond the 80/20 rule'"),
    "grpo.loss_type": _v(("dapo", "dr_grpo", "grpo", "bnpo"), "TRL's loss types in use: DAPO (TRL's default), "
                                                               "Dr. GRPO, GRPO, BNPO"),
    "grpo.scale_rewards": _v(("group", "batch", "none"), "GRPO's group std, batch std, or none (Dr. GRPO)"),
    "grpo.mask_truncated_completions": _v((False, True), "off by default; DAPO's overlong filtering turns it on"),
    "grpo.use_adaptive_entropy": _v((False, True), "off by default; Skywork-OR1 turns it on"),
    "grpo.sync_ref_model": _v((False, True), "off by default; TR-DPO style resets turn it on"),
    "reward.format.weight": _r(0.0, 1.0, "format terms weigh 0.1-1 beside correctness 1 (open-r1 weighs them 1:1)"),
    "reward.overlong.weight": _r(0.0, 1.0, "DAPO's soft overlong punishment weighs 1 when on"),
    "reward.repetition.weight": _r(0.0, 1.0, "repetition penalties of 0.1-1 (open-r1's default -1 per share)"),
    "data.pool_size": _r(512, 65_536, "RL prompt sets hold thousands of distinct prompts (DAPO-Math 17k, "
                                      "DeepScaleR 40k)", log=True, integer=True),
    "data.drop_all_correct": _v((False, True), "DAPO's dynamic sampling drops solved prompts"),
    "data.drop_all_wrong": _v((False, True), "DAPO's dynamic sampling drops unsolved prompts"),
    "data.sampling": _v(("uniform", "difficulty_targeted"), "uniform, or targeted at a pass rate (VADE, DOTS)"),
    "data.target_pass_rate": _r(0.3, 0.7, "p(1-p) peaks at 0.5 (VADE, DOTS)"),
}


def normal_range(knob: str) -> NormalRange:
    """The knob's normal range; a KeyError names the knobs that have one."""
    try:
        return NORMAL[knob]
    except KeyError:
        raise KeyError(f"{knob} has no documented normal range; knobs with one: {', '.join(sorted(NORMAL))}") from None


__all__ = ["NORMAL", "NormalRange", "normal_range"]
