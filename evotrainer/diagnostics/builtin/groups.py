"""Built-ins that read GRPO groups: how many groups of the recent window carry no learning signal.

A group whose completions all got the same reward has zero advantage and contributes no gradient; whether
that is because every completion failed (``too_hard``), every one succeeded (``too_easy``) or the reward
cannot tell them apart (``dead_groups``) calls for different fixes, so each has its own diagnostic. All
three are shares of the recent window's groups, graded by ``ShareDiagnostic``.

A group can also be all wrong, or reward-flat, because its completions were cut off at ``max_completion_length``
and scored as failures: that part is ``truncation``'s (the symptom registry's ``explains``), and its remedy is the
completion budget, not the data or the group size. So ``too_hard`` and ``dead_groups`` grade only the share truncation
does not explain (each hit group counts by the share of its completions that were *not* truncated) and report the
rest beside it. Without it, 3-token completions on arith read as critical truncation *and* warning-level dead and
too-hard groups, and the brain drafted the two dead-group remedies (one change answering two findings outranks one
answering one) instead of the completion budget (bench/log/19-flaw-suite.md, development seed 0).
"""

from __future__ import annotations

from typing import ClassVar

import pandas as pd
from pydantic import BaseModel, Field

from evotrainer.core.domain import Finding
from evotrainer.core.symptoms import SYMPTOMS
from evotrainer.diagnostics.base import need
from evotrainer.diagnostics.builtin.common import (
    NEED_SUCCESS_GROUPS,
    SUPPLY_GROUPS,
    SUPPLY_REWARD,
    ShareDiagnostic,
)
from evotrainer.diagnostics.signals import (
    EXAMPLE_COLUMNS,
    SUCCESS_COLUMNS,
    ShareParams,
    Windows,
    as_float,
    group_examples,
    group_keys,
    group_stats,
    has_column,
    metric_series,
    recent_mean,
    rollout_windows,
    rows_in,
    success,
)
from evotrainer.evidence.model import Evidence


def recent_group_rows(rollouts: pd.DataFrame, p: BaseModel, columns: tuple[str, ...]) -> tuple[Windows, pd.DataFrame] | None:
    """The windows and the recent window's rows (group keys, ``columns``, example columns), or None unless the
    rollouts have steps, GRPO groups and one of ``columns``."""
    w = rollout_windows(rollouts, p)
    keys = group_keys(rollouts)
    if w is None or keys is None or not any(has_column(rollouts, c) for c in columns):
        return None
    return w, rows_in(rollouts, w.recent, [*keys, *columns, *[c for c in TRUNCATED if has_column(rollouts, c)],
                                           *EXAMPLE_COLUMNS])


TRUNCATED = ("truncated",)  # the rollout column that says a completion hit max_completion_length


def with_truncated(rows: pd.DataFrame, values: dict[str, pd.Series]) -> dict[str, pd.Series]:
    """``values`` plus the rows' truncation flags (as 0/1) when the rollouts record them."""
    return {**values, "truncated": as_float(rows["truncated"])} if has_column(rows, "truncated") else values


def truncated_part(symptom: str, groups: pd.DataFrame, hit: pd.Series) -> float:
    """The share of all ``groups`` that are ``hit`` because their completions were truncated: each hit group counts
    by its share of truncated completions. 0 when the rollouts do not record truncation, or when the registry does
    not say that truncation explains ``symptom``."""
    if symptom not in SYMPTOMS["truncation"].explains or "truncated_mean" not in groups or not len(groups):
        return 0.0
    return float(groups["truncated_mean"].fillna(0.0).where(hit, 0.0).sum() / len(groups))


def truncation_note(part: float) -> str:
    return (f" Besides these, {part:.0%} of the groups were hit because their completions were cut off at "
            "max_completion_length: that part is truncation's (its remedy is the completion budget), not counted here."
            if part >= 0.005 else "")


class DeadGroups(ShareDiagnostic):
    name = "dead_groups"
    version = "2"  # v2: the share truncation explains is reported beside it, not graded (module docstring)
    symptom = "dead_groups"
    share_metric = "dead_group_share"
    signal = ("Share of GRPO groups whose rewards are all equal over the recent window: TRL's "
              "frac_reward_zero_std, or the reward spread per group in the rollouts; less the share truncation "
              "explains (each such group by its truncated completions) where the rollouts record it.")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling: groups with all-equal rewards have zero advantage "
                  "and no gradient); Skywork-OR1, arXiv 2505.22312 (online filtering of zero-advantage groups).")
    needs = (need("a dead-group signal", "metric:frac_reward_zero_std", "rollout:reward + rollout:group_id|prompt_id",
                  supply=f"reward: {SUPPLY_REWARD}; groups: {SUPPLY_GROUPS}"),)
    reads = ("rollout:truncated",)  # the share truncation explains is set apart (module docstring)

    class Params(ShareParams):
        warning: float = Field(0.6, ge=0.0, le=1.0, description="Dead-group share at or above which it is a warning.")
        critical: float = Field(0.85, ge=0.0, le=1.0, description="Dead-group share at or above which it is critical.")
        tolerance: float = Field(1e-9, ge=0.0, le=1.0,
                                 description="Reward spread (max - min) within a group at or below which it is dead.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        s = metric_series(ev.metrics, "frac_reward_zero_std")
        got = self._rollout_groups(ev)
        if s is not None:
            w, share = recent_mean(s, self.params)
            source = "metric 'frac_reward_zero_std'"
        else:
            if got is None:
                return self.not_enough("metric 'frac_reward_zero_std' or rollouts with 'reward' and 'group_id'")
            groups, _, w = got
            share, source = float(groups["dead"].mean()), "rollouts (reward spread per group)"
        part = 0.0 if got is None else truncated_part(self.symptom, got[0], got[0]["dead"])

        def examples():
            if got is None:
                return []
            groups, rows, _ = got
            return group_examples(rows, groups[groups["dead"]])

        return self.share_finding(
            max(0.0, share - part), w.recent, "GRPO groups",
            f"have all-equal rewards ({source}), so they contribute no gradient. Filter or resample such groups "
            "(DAPO dynamic sampling), or move the task difficulty toward the policy's current level."
            + truncation_note(part),
            examples=examples, extra={"steps": w.recent.n, "with_truncated": share, "truncated_part": part})

    def _rollout_groups(self, ev: Evidence):
        """(per-group table with a 'dead' column, the recent rows, windows) from the rollouts, or None."""
        got = recent_group_rows(ev.rollouts, self.params, ("reward",))
        if got is None:
            return None
        w, rows = got
        groups = group_stats(rows, with_truncated(rows, {"reward": as_float(rows["reward"])}))
        if not len(groups):
            return None
        groups["dead"] = (groups["reward_max"] - groups["reward_min"]) <= self.params.tolerance
        return groups, rows, w


class _GroupOutcome(ShareDiagnostic):
    """Share of groups in the recent window whose completions all succeeded (``all_ok``) or all failed."""

    all_ok: ClassVar[bool]
    advice: ClassVar[str]
    needs = (NEED_SUCCESS_GROUPS,)

    def analyze(self, ev: Evidence) -> list[Finding]:
        got = recent_group_rows(ev.rollouts, self.params, SUCCESS_COLUMNS)
        if got is None:
            return self.not_enough("rollouts with 'correct' (or 'reward') and 'group_id'")
        w, rows = got
        ok_series, source = success(rows)
        groups = group_stats(rows, with_truncated(rows, {"ok": ok_series}))
        if not len(groups):
            return self.not_enough("GRPO groups of at least 2 completions in the recent window")
        hit = groups["ok_min"] == 1 if self.all_ok else groups["ok_max"] == 0
        share, part = float(hit.mean()), truncated_part(self.symptom, groups, hit)
        return self.share_finding(
            max(0.0, share - part), w.recent, "GRPO groups",
            f"are {'all correct' if self.all_ok else 'all wrong'} (by {source}), so they carry no learning signal. "
            f"{self.advice}" + truncation_note(part),
            examples=lambda: group_examples(rows, groups[hit]), counts={"groups": len(groups)},
            extra={"with_truncated": share, "truncated_part": part})


class TooHard(_GroupOutcome):
    name = "too_hard"
    version = "2"  # v2: as dead_groups v2
    symptom = "too_hard"
    share_metric = "all_wrong_share"
    all_ok = False
    signal = ("Share of GRPO groups in the recent window where every completion is wrong (strict 'correct', "
              "else correctness reward or reward <= 0), less the share truncation explains (each such group by its "
              "truncated completions) where the rollouts record it.")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling of groups with accuracy 0); Skywork-OR1, arXiv "
                  "2505.22312 (offline and online filtering of prompts with pass rate 0).")
    advice = "Lower the task difficulty or add easier prompts until the policy succeeds sometimes."
    reads = ("rollout:truncated",)  # as DeadGroups (truncation explains all-wrong groups, not all-correct ones)

    class Params(ShareParams):
        warning: float = Field(0.7, ge=0.0, le=1.0, description="All-wrong group share at or above which it is a warning.")
        critical: float = Field(0.9, ge=0.0, le=1.0, description="All-wrong group share at or above which it is critical.")


class TooEasy(_GroupOutcome):
    name = "too_easy"
    version = "2"
    symptom = "too_easy"
    share_metric = "all_correct_share"
    all_ok = True
    signal = ("Share of GRPO groups in the recent window where every completion is correct (strict 'correct', "
              "else correctness reward or reward > 0).")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling of groups with accuracy 1); Skywork-OR1, arXiv "
                  "2505.22312 (filtering prompts with pass rate 1).")
    advice = "Raise the difficulty or drop solved prompts: compute is being spent on what is already learned."

    class Params(ShareParams):
        warning: float = Field(0.6, ge=0.0, le=1.0, description="All-correct group share at or above which it is a warning "
                                "(v2: 0.6, like dead_groups; a real 94%-accurate run had 0.69).")
        critical: float = Field(1.0, ge=0.0, le=1.0,
                                description="All-correct group share at or above which it is critical (1.0: only when every group is solved).")
