"""Built-ins that compare what training optimises with what it should achieve: reward against strict and
held-out accuracy, and held-out accuracy over time.

A rising reward is the goal only while it tracks the task: when it outgrows strict accuracy the checker is
being gamed (``reward_hacking``), when train accuracy outgrows held-out accuracy the policy is memorising
its prompts (``overfitting``), and when an earlier distribution's held-out accuracy falls the run is
trading old skills for new ones (``forgetting``). These read the eval metrics, so they judge eval points
rather than step windows where they must.
"""

from __future__ import annotations

import fnmatch
import math

import numpy as np
import pandas as pd
from pydantic import Field

from evotrainer.core.domain import Finding, Severity
from evotrainer.diagnostics.base import Need, need
from evotrainer.diagnostics.builtin.common import (
    SUPPLY_CORRECT,
    SUPPLY_EVAL,
    SUPPLY_REWARD,
    BuiltinDiagnostic,
)
from evotrainer.diagnostics.signals import (
    EXAMPLE_COLUMNS,
    REWARD_COLUMNS,
    BaseParams,
    StepSeries,
    Window,
    WindowParams,
    as_float,
    change_over,
    confidence,
    early_recent,
    examples_in,
    first_column,
    has_column,
    metric_or_rollout,
    metric_series,
    recent_examples,
    rows_in,
    support,
    window_confidence,
    worst,
)
from evotrainer.evidence.model import Evidence


# reward_hacking v2 (gap 0.2 → 0.1, growth 0.1 → 0.05) is a revision accepted by `evotrainer diagnostics revise`
# on the labelled archive of bench/pathological_runs.py: F1 0.5 → 1.0, recall on invalid (exploit) runs
# 0.33 → 1.0, no false positive on healthy runs (bench/log/04-detection.md). Real spraying runs gained 0.1-0.2 of
# lenient reward while strict accuracy fell, below v1's 0.2 gap.
# v3 (2026-11-28, bench/log/12-detection-out-of-sample.md): a run whose reward functions carry other names (a plain TRL script's
# `lenient`, with a zero-weight `exact_match` as strict correctness) fell to the gain rule and its 0.2 rise; the
# tuning half's `trl-lenient-s2` gamed its checker by a 0.13 gap and was missed. When the optimised reward *is* one
# function's reward step for step, that function is the checker being optimised, and the gap rule reads it.
class RewardHacking(BuiltinDiagnostic):
    name = "reward_hacking"
    version = "3"
    symptom = "reward_hacking"
    signal = ("Correctness reward (or the one reward function the optimised reward equals) vs strict accuracy per "
              "step (metrics or rollouts): the gap growing from the early to the recent window; or reward rising "
              "while strict or held-out greedy accuracy does not.")
    literature = ("Scaling Laws for Reward Model Overoptimization (Gao et al.), arXiv 2210.10760; Defining and "
                  "Characterizing Reward Hacking (Skalse et al.), arXiv 2209.13085.")
    needs = (need("a reward", "metric:rewards/correctness/mean", "rollout:reward_correctness", "metric:reward",
                  "rollout:reward", supply=SUPPLY_REWARD),
             need("strict correctness or held-out accuracy", "metric:accuracy", "rollout:correct",
                  "metric:eval/greedy_accuracy", supply=f"{SUPPLY_CORRECT}; or {SUPPLY_EVAL}"))

    class Params(WindowParams):
        gap: float = Field(0.1, ge=0.0, le=1.0, description="Recent (correctness reward - strict accuracy) at or above which it is a warning (v2: 0.1).")
        critical_gap: float = Field(0.5, ge=0.0, le=1.0, description="Recent gap at or above which it is critical.")
        min_gap_growth: float = Field(0.05, ge=0.0, le=1.0, description="The recent gap must exceed the early gap by at least this much (v2: 0.05).")
        min_reward_gain: float = Field(0.2, ge=0.0, description="Reward gain (early→recent, or over the eval span) that counts as 'rising'.")
        max_accuracy_gain: float = Field(0.0, ge=-1.0, le=1.0, description="Accuracy gain at or below which accuracy 'does not rise'.")
        min_eval_points: int = Field(3, ge=3, description="Fewest held-out eval points for the held-out rule.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        acc = metric_or_rollout(ev, "accuracy", "correct")
        corr = metric_or_rollout(ev, "rewards/correctness/mean", "reward_correctness")
        total = metric_or_rollout(ev, "reward", "reward")
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        if corr is None and acc is not None and total is not None:
            corr = self._sole_reward(ev, total)
        reward = corr or total
        if reward is None or (acc is None and (evals is None or len(evals) < p.min_eval_points)):
            return self.not_enough("a reward (metric or rollouts) and strict accuracy (metric 'accuracy' or "
                                     f"rollout 'correct') or {p.min_eval_points}+ points of 'eval/greedy_accuracy'")
        hits: list[tuple[Severity, float, tuple[int, int] | None, str]] = []
        metrics: dict[str, float] = {}
        if acc is not None and corr is not None:
            hits += self._gap_rule(corr, acc, metrics)
        elif acc is not None:
            hits += self._gain_rule(total, acc, metrics)
        if evals is not None and len(evals) >= p.min_eval_points:
            hits += self._eval_rule(reward, acc, evals, metrics)
        if not hits:
            return []
        sev = worst(*(h[0] for h in hits))
        conf = max(h[1] for h in hits)
        steps = next((h[2] for h in hits if h[2]), None)
        r = ev.rollouts
        examples = []
        if steps and len(r) and has_column(r, "correct"):
            rcol = first_column(r, REWARD_COLUMNS)
            if rcol:
                rows = rows_in(r, Window(steps[0], steps[1], 0), [rcol, *EXAMPLE_COLUMNS])
                bad = (as_float(rows[rcol]) > 0).to_numpy() & (as_float(rows["correct"]) == 0).to_numpy()
                examples = recent_examples(rows[bad])
        return [self.finding(
            sev, " ".join(h[3] for h in hits) + " Tighten the checker (strict match, one answer) and compare "
                 "rewarded completions with strict verdicts before training further.",
            confidence=conf, steps=steps, examples=examples, metrics=metrics)]

    @staticmethod
    def _sole_reward(ev: Evidence, total: StepSeries) -> StepSeries | None:
        """The one reward function the optimised reward equals at every step (3+ steps; a run that optimises a
        single function, whatever its name, beside zero-weight ones), or None. Two functions equal to it (both
        constant, say) name no single checker."""
        found = []
        for col in (c for c in ev.metrics.columns if str(c).startswith("rewards/") and str(c).endswith("/mean")):
            s = metric_series(ev.metrics, col)
            both = pd.concat([total.values, s], axis=1, join="inner").dropna() if s is not None else None
            if both is not None and len(both) >= 3 and np.allclose(both.iloc[:, 0], both.iloc[:, 1], atol=1e-6) \
                    and both.iloc[:, 0].nunique() > 1:
                found.append(StepSeries(s, f"metric '{col}' (the only reward optimised)"))
        return found[0] if len(found) == 1 else None

    def _gap_rule(self, corr: StepSeries, acc: StepSeries, metrics: dict[str, float]):
        p = self.params
        gap = (corr.values - acc.values).dropna()
        er = early_recent(gap, p)
        if er is None:
            return []
        w, early, recent = er
        metrics |= {"early_gap": early, "recent_gap": recent, "gap_threshold": p.gap, "critical_gap": p.critical_gap,
                    "min_gap_growth": p.min_gap_growth}
        if recent < p.gap or recent < early + p.min_gap_growth:
            return []
        sev: Severity = "critical" if recent >= p.critical_gap else "warning"
        conf = window_confidence(recent, p.gap, p.critical_gap, w.recent, p)
        return [(sev, conf, w.recent.steps,
                 f"The correctness reward ({corr.source}) exceeds strict accuracy by {recent:.2f} in steps "
                 f"{w.recent.lo}-{w.recent.hi} "
                 f"(early gap {early:.2f}): rewarded completions are increasingly not strictly correct.")]

    def _gain_rule(self, total: StepSeries | None, acc: StepSeries, metrics: dict[str, float]):
        p = self.params
        if total is None:
            return []
        both = pd.concat([total.values, acc.values], axis=1, join="inner").dropna()
        er_r = early_recent(both.iloc[:, 0], p)
        er_a = early_recent(both.iloc[:, 1], p)
        if er_r is None or er_a is None:
            return []
        w, r0, r1 = er_r
        _, a0, a1 = er_a
        metrics |= {"reward_gain": r1 - r0, "accuracy_gain": a1 - a0, "min_reward_gain": p.min_reward_gain,
                    "max_accuracy_gain": p.max_accuracy_gain}
        if r1 - r0 < p.min_reward_gain or a1 - a0 > p.max_accuracy_gain:
            return []
        conf = window_confidence(r1 - r0, p.min_reward_gain, 2 * p.min_reward_gain + 0.1, w.recent, p)
        return [("warning", conf, w.recent.steps,
                 f"Reward rose by {r1 - r0:.2f} while strict accuracy changed by {a1 - a0:+.2f}.")]

    def _eval_rule(self, reward: StepSeries, acc: StepSeries | None, evals: pd.Series, metrics: dict[str, float]):
        """Reward rising over the eval span while held-out accuracy does not. The part of the reward gain that
        strict train accuracy explains is taken off first: reward and train accuracy rising together while
        held-out accuracy stays flat is overfitting, not a hacked reward."""
        p = self.params
        lo, hi = int(evals.index[0]), int(evals.index[-1])
        reward_gain = change_over(reward.values, lo, hi)
        if hi <= lo or not np.isfinite(reward_gain):
            return []
        acc_gain = change_over(acc.values, lo, hi) if acc is not None else float("nan")
        unexplained = reward_gain - (acc_gain if np.isfinite(acc_gain) else 0.0)
        eval_gain = change_over(evals, lo, hi)
        metrics |= {"reward_gain_over_evals": reward_gain, "eval_gain": eval_gain, "eval_points": len(evals),
                    "unexplained_reward_gain": unexplained, "min_reward_gain": p.min_reward_gain}
        if unexplained < p.min_reward_gain or eval_gain > p.max_accuracy_gain:
            return []
        conf = confidence(unexplained, p.min_reward_gain, 2 * p.min_reward_gain + 0.1, support(len(evals), 6))
        return [("warning", conf, (lo, hi),
                 f"Reward rose by {reward_gain:.2f} over steps {lo}-{hi}"
                 + (f" (strict train accuracy by {acc_gain:+.2f})" if np.isfinite(acc_gain) else "")
                 + f" while held-out greedy accuracy changed by {eval_gain:+.2f} over {len(evals)} evaluations.")]


class Forgetting(BuiltinDiagnostic):
    name = "forgetting"
    version = "1"
    symptom = "forgetting"
    signal = ("Held-out accuracy on earlier distributions (metrics 'eval/<suite>/greedy_accuracy'): the latest "
              "smoothed value against the best smoothed value before it.")
    literature = "Overcoming catastrophic forgetting in neural networks (Kirkpatrick et al.), arXiv 1612.00796."

    class Params(BaseParams):
        pattern: str = Field("eval/*/greedy_accuracy", min_length=1, description="fnmatch pattern of the suite series.")
        drop: float = Field(0.1, gt=0.0, le=1.0, description="Absolute drop from the best value at or above which it is a warning.")
        smooth_points: int = Field(2, ge=1, le=20, description="Eval points averaged (rolling) before comparing; damps eval noise.")
        min_points: int = Field(3, ge=2, description="Fewest eval points a suite needs.")

    def declared_needs(self) -> tuple[Need, ...]:
        return (need("held-out accuracy on an earlier distribution", f"metric:{self.params.pattern}",
                     supply="log it per evaluation as 'eval/<suite>/greedy_accuracy'"),)

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        cols = [c for c in ev.metrics.columns if fnmatch.fnmatchcase(str(c), p.pattern)]
        series = {c: s for c in cols if (s := metric_series(ev.metrics, c)) is not None}
        if not series:
            return self.not_enough(f"held-out series of an earlier distribution (metrics matching '{p.pattern}')")
        out = []
        for c, s in series.items():
            if len(s) < p.min_points:
                continue
            k = min(p.smooth_points, len(s) - 1)
            sm = s.rolling(k, min_periods=k).mean().dropna()
            best_step = int(sm.idxmax())
            best, now = float(sm.max()), float(sm.iloc[-1])
            drop = best - now
            if drop < p.drop:
                continue
            out.append(self.finding(
                "warning", f"{c} fell from {best:.2f} (step {best_step}) to {now:.2f} (step {int(sm.index[-1])}): "
                           "training on the current distribution is erasing an earlier one. Mix earlier data back "
                           "in (replay), lower the learning rate, or add a KL anchor.",
                confidence=confidence(drop, p.drop, 3 * p.drop, support(len(s), 6)),
                steps=(best_step, int(sm.index[-1])), examples=examples_in(ev, (best_step, int(sm.index[-1]))),
                metrics={"best": best, "latest": now, "drop": drop, "drop_threshold": p.drop, "eval_points": len(s)}))
        return out


REMEDY = "Enlarge or refresh the prompt pool, or stop at the best held-out checkpoint."
# The reuse rule's thresholds (v2, 2026-12-04), set on the flaw suite's development seeds 0-2 only
# (bench/log/19-flaw-suite.md): round 0 of the pool of 64 (32 prompts a step: a recent-window rollout's prompt was
# trained on 8.2 earlier steps on average) against the same segment of every other development cell, whose prompts
# were trained on 3.2 earlier steps (the level-1 curriculum's 150 problems) or none.
REUSE = 4.0
REUSE_GAIN = 0.05


class Overfitting(BuiltinDiagnostic):
    """Two readings of one symptom. Over four or more evaluations with train accuracy beside them: the
    train-minus-held-out gap grows (the gap rule). Over fewer (a campaign's first 20-step segment has two, at its
    start and its end, and the one at step 0 has no train step before it), the gap cannot be followed, but the
    rollouts show what memorising needs, the same prompts trained again and again: when the recent window's
    rollouts come from prompts trained on several earlier steps on average and train accuracy over the windows rises
    while held-out accuracy, measured at the span's two ends, does not keep up, the policy is learning those prompts
    rather than the task (the reuse rule). On fresh prompts a train gain beyond the held-out one is not
    memorisation (the sampled accuracy of a sharpening policy catches up with its greedy one), which is why the
    rule needs the reuse."""

    name = "overfitting"
    version = "2"
    symptom = "overfitting"
    signal = ("Train accuracy ('accuracy' metric or rollout 'correct', averaged over the steps before each eval) "
              "minus 'eval/greedy_accuracy' at eval steps: the recent gap against the early gap. With fewer eval "
              "points: how often the recent window's prompts ('prompt_id') were trained before, and the train "
              "accuracy gain from the early to the recent window against the held-out gain over the span.")
    literature = ("Quantifying Generalization in Reinforcement Learning (Cobbe et al.), arXiv 1812.02341; SFT "
                  "Memorizes, RL Generalizes (Chu et al.).")
    needs = (need("train accuracy", "metric:accuracy", "rollout:correct", supply=SUPPLY_CORRECT),
             need("held-out accuracy", "metric:eval/greedy_accuracy", supply=SUPPLY_EVAL))
    reads = ("rollout:prompt_id", "rollout:group_id")  # the reuse rule, with too few eval points for the gap rule

    class Params(WindowParams):
        gap: float = Field(0.15, ge=0.0, le=1.0, description="Recent train-minus-held-out gap at or above which it is a warning ...")
        min_growth: float = Field(0.1, ge=0.0, le=1.0, description="... when it also exceeds the early gap by at least this.")
        align_steps: int = Field(10, ge=1, description="Train steps (up to each eval step) averaged into the train accuracy at that eval.")
        min_points: int = Field(4, ge=2, description="Fewest eval points with a train accuracy beside them for the gap rule; "
                                                      "with fewer (and at least 2), the reuse rule judges.")
        points_frac: float = Field(0.34, gt=0.0, le=0.5, description="Share of the eval points in the early and in the recent group.")
        min_reuse: float = Field(REUSE, ge=1.0, description="Reuse rule: earlier steps the recent window's prompts were "
                                                            "trained on, on average, at or above which they can be memorised.")
        reuse_gain: float = Field(REUSE_GAIN, ge=0.0, le=1.0,
                                  description="Reuse rule: train accuracy must rise by at least this from the early to "
                                              "the recent window, and by at least this more than held-out accuracy "
                                              "over the span.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        train = metric_or_rollout(ev, "accuracy", "correct")
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        if train is None or evals is None:
            return self.not_enough("train accuracy (metric 'accuracy' or rollout 'correct') and metric 'eval/greedy_accuracy'")
        t = train.values.rolling(p.align_steps, min_periods=1).mean()
        left = pd.DataFrame({"step": evals.index.astype("int64"), "eval": evals.to_numpy()})
        right = pd.DataFrame({"step": t.index.astype("int64"), "train": t.to_numpy()})
        both = pd.merge_asof(left, right, on="step", direction="backward", tolerance=p.align_steps).dropna()
        if len(both) < p.min_points:
            return self._reuse_rule(ev, train, evals)
        gap = (both["train"] - both["eval"]).to_numpy()
        k = max(1, math.ceil(p.points_frac * len(gap)))
        early, recent = float(gap[:k].mean()), float(gap[-k:].mean())
        if recent < p.gap or recent < early + p.min_growth:
            return []
        lo, hi = int(both["step"].iloc[-k]), int(both["step"].iloc[-1])
        return [self.finding(
            "warning", f"Train accuracy exceeds held-out greedy accuracy by {recent:.2f} at the last {k} evaluations "
                       f"(early gap {early:.2f}): the policy is fitting the training prompts, not the task. {REMEDY}",
            confidence=confidence(recent - early, p.min_growth, 3 * p.min_growth, support(len(gap), 8)),
            steps=(lo, hi), examples=examples_in(ev, (lo, hi)),
            metrics={"early_gap": early, "recent_gap": recent, "gap_threshold": p.gap, "min_growth": p.min_growth,
                     "eval_points": len(gap)})]

    def _reuse_rule(self, ev: Evidence, train: StepSeries, evals: pd.Series) -> list[Finding]:
        p = self.params
        short = (f"at least {p.min_points} eval points with train accuracy beside them, or 2 and the rollouts' "
                 "'prompt_id' and 'group_id'")
        r = ev.rollouts
        if len(evals) < 2 or not (has_column(r, "prompt_id") and has_column(r, "group_id")) or "step" not in r.columns:
            return self.not_enough(short)
        # ids that do not tell problems apart (a reader hashing an empty prompt gives every group one id) would count
        # every step as a revisit: a step's groups must mostly carry distinct ids
        per_step = r.groupby("step").agg(ids=("prompt_id", "nunique"), groups=("group_id", "nunique"))
        if float((per_step["ids"] / per_step["groups"].clip(lower=1)).median()) < 0.5:
            return self.not_enough("prompt ids that tell a step's problems apart (most groups of a step share one)")
        er = early_recent(train.values, p)
        if er is None:
            return self.not_enough(f"{2 * p.min_window_steps} train steps for an early and a recent window")
        w, a0, a1 = er
        lo, hi = int(evals.index[0]), int(evals.index[-1])
        if lo > w.early.hi or hi < w.recent.lo:  # the held-out span must reach into both windows
            return self.not_enough("held-out evaluations at the span's start and end")
        seen = r[["prompt_id", "step"]].dropna().drop_duplicates()
        seen = seen.assign(before=seen.groupby("prompt_id")["step"].rank(method="dense") - 1)
        rec = r[w.recent.mask(r["step"].to_numpy())][["prompt_id", "step"]].merge(seen, on=["prompt_id", "step"])
        reuse = float(rec["before"].mean()) if len(rec) else 0.0
        train_gain, eval_gain = a1 - a0, float(evals.iloc[-1] - evals.iloc[0])
        metrics = {"reuse": reuse, "min_reuse": p.min_reuse, "train_gain": train_gain, "eval_gain": eval_gain,
                   "reuse_gain": p.reuse_gain, "eval_points": len(evals)}
        excess = train_gain - eval_gain
        if reuse < p.min_reuse or train_gain < p.reuse_gain or excess < p.reuse_gain:
            return []
        return [self.finding(
            "warning", f"Train accuracy rose by {train_gain:+.2f} (steps {w.early.lo}-{w.early.hi} to "
                       f"{w.recent.lo}-{w.recent.hi}) on prompts trained {reuse:.1f} times before, while held-out "
                       f"greedy accuracy changed by {eval_gain:+.2f} over steps {lo}-{hi}: the policy is learning "
                       f"its training prompts faster than the task. {REMEDY}",
            confidence=window_confidence(excess, p.reuse_gain, 3 * p.reuse_gain, w.recent, p),
            steps=w.recent.steps, examples=examples_in(ev, w.recent), metrics=metrics)]
