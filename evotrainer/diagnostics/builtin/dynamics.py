"""Built-ins that read the per-step training dynamics: entropy, KL, gradient norm, non-finite values, progress
(``plateau``: reward and held-out accuracy flat; ``learns_nothing``: held-out accuracy flat while the reward moves).

Each reads a TRL metric series (or the same quantity aggregated from the rollouts), not the rollout text:
they say how the optimisation is behaving, whatever the task. Entropy collapse and blow-up are one rule
(the recent mean against the early mean, past an absolute bound) read in the two directions.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pandas as pd
from pydantic import Field

from evotrainer.core.domain import Finding, Severity
from evotrainer.diagnostics.base import Need, need
from evotrainer.diagnostics.builtin.common import NEED_REWARD, BuiltinDiagnostic
from evotrainer.diagnostics.signals import (
    BaseParams,
    WindowParams,
    as_float,
    between,
    change_over,
    change_se_over,
    confidence,
    early_recent,
    examples_in,
    grade,
    has_column,
    metric_or_rollout,
    metric_series,
    recent_examples,
    recent_mean,
    support,
    window_confidence,
)
from evotrainer.evidence.model import Evidence

# ------------------------------------------------------------------------------------------------ entropy


class _EntropyShift(BuiltinDiagnostic):
    """Mean entropy of the recent window against the start level: graded on their ratio (``ratio`` /
    ``critical_ratio``, strictly past), and only when the recent mean is also past an absolute ``bound``.

    Version 2: the reference is the mean of the first ``start_steps`` steps, not of the whole early window.
    A real run with a 100× learning rate collapsed within 4 steps, inside the early window, so early and
    recent means were alike and version 1 stayed quiet (tests/fixtures/runs/lr-too-high-s1)."""

    requires_metrics = ("entropy",)
    rising: ClassVar[bool]  # True: a blow-up (ratios above 1); False: a collapse (ratios below 1)
    bound: ClassVar[str]  # the Params field holding the absolute bound
    story: ClassVar[str]  # the explanation after "Policy entropy ", formatted with early, recent and ratio

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        series = metric_series(ev.metrics, "entropy")
        er = early_recent(series, p)
        if er is None:
            return self.not_enough(f"at least {2 * p.min_window_steps} steps of metric 'entropy'")
        w, _, recent = er
        early = float(series.iloc[: p.start_steps].mean())
        bound = getattr(p, self.bound)
        if (recent <= bound) if self.rising else (recent >= bound):
            return []
        ratio = recent / early if early > 0 else float("inf")
        sev = grade(ratio, p.ratio, p.critical_ratio, higher=self.rising, strict=True)
        if sev is None:
            return []
        story = "Policy entropy " + self.story.format(early=early, recent=recent, ratio=ratio)
        ratio = min(ratio, 1e9)
        return [self.finding(
            sev, story, confidence=window_confidence(ratio, p.ratio, p.critical_ratio, w.recent, p),
            steps=w.recent.steps, examples=examples_in(ev, w.recent),
            metrics={"early_entropy": early, "recent_entropy": recent, "ratio": ratio, "ratio_threshold": p.ratio,
                     "critical_ratio": p.critical_ratio, self.bound: bound})]


class EntropyCollapse(_EntropyShift):
    name = "entropy_collapse"
    version = "2"
    symptom = "entropy_collapse"
    signal = "Mean policy entropy (TRL 'entropy') of the recent window against its start level, and an absolute floor."
    literature = ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, arXiv 2505.22617; "
                  "DAPO, arXiv 2503.14476 (clip-higher against entropy collapse); Skywork-OR1, arXiv 2505.22312; "
                  "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL for LLM Reasoning, "
                  "arXiv 2506.01939.")
    rising = False
    bound = "floor"
    story = ("fell from {early:.3f} to {recent:.3f} nats/token ({ratio:.0%} of its start): sampling has become "
             "near-deterministic and exploration has stopped. Try clip-higher (a larger epsilon_high), an entropy "
             "bonus, or a higher sampling temperature.")

    class Params(WindowParams):
        ratio: float = Field(0.25, gt=0.0, lt=1.0, description="Warning when recent mean < ratio × start level (and below the floor).")
        critical_ratio: float = Field(0.1, gt=0.0, lt=1.0, description="Critical when recent mean < critical_ratio × start level (and below the floor).")
        floor: float = Field(0.15, ge=0.0, description="Absolute entropy (nats/token) the recent mean must also be below.")
        start_steps: int = Field(3, ge=1, le=1000, description="First steps whose mean entropy is the start level.")


class EntropyBlowup(_EntropyShift):
    name = "entropy_blowup"
    version = "2"
    symptom = "entropy_blowup"
    signal = "Mean policy entropy (TRL 'entropy') of the recent window against its start level, and an absolute level."
    literature = ("Skywork-OR1, arXiv 2505.22312 (entropy loss can make entropy explode; adaptive entropy control); "
                  "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, arXiv 2505.22617.")
    rising = True
    bound = "level"
    story = ("rose from {early:.3f} to {recent:.3f} nats/token (×{ratio:.1f}): completions are drifting toward "
             "noise. Lower or anneal the entropy coefficient, lower the learning rate, or tighten clipping.")

    class Params(WindowParams):
        ratio: float = Field(2.0, gt=1.0, description="Warning when recent mean > ratio × start level (and above the level).")
        critical_ratio: float = Field(4.0, gt=1.0, description="Critical when recent mean > critical_ratio × start level (and above the level).")
        level: float = Field(1.5, ge=0.0, description="Absolute entropy (nats/token) the recent mean must also exceed.")
        start_steps: int = Field(3, ge=1, le=1000, description="First steps whose mean entropy is the start level.")


# ------------------------------------------------------------------------------------------------ optimisation


class KLBlowup(BuiltinDiagnostic):
    name = "kl_blowup"
    version = "1"
    symptom = "kl_blowup"
    signal = "Mean per-token KL to the reference (TRL 'kl') of the recent window: its level, and its growth over the early window."
    literature = ("Proximal Policy Optimization Algorithms, arXiv 1707.06347; Training language models to follow "
                  "instructions with human feedback, arXiv 2203.02155 (KL-penalised RL from a reference policy).")
    requires_metrics = ("kl",)

    class Params(WindowParams):
        warning: float = Field(0.5, ge=0.0, description="Recent mean KL at or above which it is a warning.")
        critical: float = Field(2.0, ge=0.0, description="Recent mean KL at or above which it is critical.")
        growth: float = Field(10.0, gt=1.0, description="Warning when the recent mean is at least growth × the early mean ...")
        growth_min_kl: float = Field(0.2, ge=0.0, description="... and at least this large (KL starts near 0, so small values grow fast).")
        early_floor: float = Field(0.01, gt=0.0, description="The early mean is taken as at least this (avoids dividing by ~0).")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        s = metric_series(ev.metrics, "kl")
        w, recent = recent_mean(s, p)
        early = max(float(w.early.of(s).mean()), p.early_floor) if w.disjoint else float("nan")
        growth = recent / early if w.disjoint else float("nan")
        sev = grade(recent, p.warning, p.critical)
        if sev is None and w.disjoint and recent >= p.growth_min_kl and growth >= p.growth:
            sev = "warning"
        if sev is None:
            return []
        metrics = {"recent_kl": recent, "warning": p.warning, "critical": p.critical, "growth_threshold": p.growth}
        if w.disjoint:
            metrics |= {"early_kl": early, "growth": growth}
        conf = window_confidence(recent, p.warning, p.critical, w.recent, p)
        if recent < p.warning:
            conf = window_confidence(growth, p.growth, 3 * p.growth, w.recent, p)
        return [self.finding(
            sev, f"KL to the reference policy averages {recent:.3f} in steps {w.recent.lo}-{w.recent.hi}"
                 + (f" (×{growth:.0f} the early level)" if w.disjoint else "") + ": the policy is moving far from "
                 "its reference. Lower the learning rate, raise beta, or reset the reference.",
            confidence=conf, steps=w.recent.steps, examples=examples_in(ev, w.recent), metrics=metrics)]


class GradSpike(BuiltinDiagnostic):
    """Version 2 adds ``min_norm``: in runs whose groups are all dead the median grad_norm is ~1e-4, so any
    ordinary step looked like a ×1000 "spike" (tests/fixtures/runs/too-short-s0). Version 3 raises it from 1.0 to
    2.0, scored on both halves of the labelled archive (bench/log/12-detection-out-of-sample.md, 2026-11-24): the mostly-dead too-short
    runs still had single steps at grad_norm 1.0-1.6 (×10,000 the median, under TRL's default clip of 1.0); false
    alarms went from 2 to 1 on the tuning half and from 2 to 1 on the held-out half."""

    name = "grad_spike"
    version = "3"
    symptom = "grad_spike"
    signal = "Steps where 'grad_norm' exceeds k × the rolling median of the previous W steps."
    literature = ("A Theory on Adam Instability in Large-Scale Machine Learning (Molybog et al.); RAGEN, arXiv "
                  "2504.20073 (gradient spikes in the Echo Trap).")
    requires_metrics = ("grad_norm",)

    class Params(BaseParams):
        factor: float = Field(10.0, gt=1.0, description="A step spikes when grad_norm > factor × the rolling median.")
        window: int = Field(20, ge=3, le=10_000, description="Previous steps the rolling median covers.")
        min_history: int = Field(5, ge=1, le=10_000, description="Fewest previous steps before a spike can be called.")
        critical_count: int = Field(3, ge=1, description="Spikes at or above which it is critical (repeated spikes).")
        min_norm: float = Field(2.0, ge=0.0, description="A spike must also exceed this absolute grad_norm (ratios to a "
                                "near-zero median are meaningless).")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        s = metric_series(ev.metrics, "grad_norm")
        s = s[s > 0]
        median = s.shift(1).rolling(p.window, min_periods=min(p.min_history, p.window)).median()
        ratio = (s / median).dropna()
        spikes = ratio[(ratio > p.factor) & (s.reindex(ratio.index) > p.min_norm)]
        if spikes.empty:
            return []
        n = len(spikes)
        sev: Severity = "critical" if n >= p.critical_count else "warning"
        first, last = int(spikes.index[0]), int(spikes.index[-1])
        top = int(spikes.idxmax())
        return [self.finding(
            sev, f"grad_norm spiked above {p.factor:g}× its running median {n} time(s) between steps {first} and "
                 f"{last} (worst ×{spikes.max():.0f} at step {top}). Lower the learning rate or max_grad_norm, "
                 "and look at the rollouts of the spiking steps for outliers.",
            confidence=confidence(float(spikes.max()), p.factor, 5 * p.factor, support(n, p.critical_count)),
            steps=(first, last), examples=examples_in(ev, (top, top)),
            metrics={"spikes": n, "max_ratio": float(spikes.max()), "worst_step": top, "factor": p.factor,
                     "window": p.window, "critical_count": p.critical_count, "min_norm": p.min_norm})]


class NonFinite(BuiltinDiagnostic):
    """Version 2: when the only non-finite values are gradient norms on steps whose update the trainer skipped
    (metric ``update_skipped``, written by EvoTrainer's jobs since the bf16 GPU runs of bench/log/13-a-real-pretrained-model.md), the
    weights never saw them; the finding is a warning that says so, not a critical "training is meaningless"."""

    name = "nan"
    version = "2"
    symptom = "nan"
    signal = ("NaN or ±inf in the 'loss', 'grad_norm', 'reward' or 'entropy' metrics, or in the rollouts' 'reward' "
              "(a warning only, when every one is a grad_norm whose update was skipped: metric 'update_skipped').")
    literature = "Mixed Precision Training, arXiv 1710.03740 (overflow, loss scaling and non-finite gradients)."

    class Params(BaseParams):
        metrics: list[str] = Field(default_factory=lambda: ["loss", "grad_norm", "reward", "entropy"],
                                   description="Metric columns checked for NaN/inf.")
        dense_share: float = Field(0.5, gt=0.0, le=1.0,
                                   description="A row counts as a training log when it holds at least this share of the non-eval metric columns; only there is a NaN evidence (elsewhere it means 'not logged').")

    # which metrics each row holds tells a training log (where NaN is evidence) from an eval-only row
    reads = ("metric:*", "metric:update_skipped")

    def declared_needs(self) -> tuple[Need, ...]:
        return (need("a value to check", *(f"metric:{c}" for c in self.params.metrics), "rollout:reward"),)

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        m = ev.metrics
        watched = [c for c in p.metrics if c in m.columns and "step" in m.columns]
        rollout_reward = "step" in ev.rollouts.columns and has_column(ev.rollouts, "reward")
        if not watched and not rollout_reward:
            return self.not_enough("one of metrics " + ", ".join(f"'{c}'" for c in p.metrics) + " or rollout column 'reward'")
        bad_steps: list[np.ndarray] = []
        metrics: dict[str, float] = {}
        if watched:
            logged = self._training_rows(m)
            for c in watched:
                v = as_float(m[c]).to_numpy()
                bad = ~np.isfinite(v) & (logged | np.isinf(v))
                if bad.any():
                    metrics[f"nonfinite_{c}"] = int(bad.sum())
                    bad_steps.append(as_float(m["step"]).to_numpy()[bad])
        rows_bad = None
        if rollout_reward:
            v = as_float(ev.rollouts["reward"]).to_numpy()
            bad = ~np.isfinite(v)
            if bad.any():
                metrics["nonfinite_rollout_reward"] = int(bad.sum())
                bad_steps.append(ev.rollouts["step"].to_numpy()[bad].astype("float64"))
                rows_bad = ev.rollouts[bad]
        steps = np.concatenate(bad_steps) if bad_steps else np.array([])
        steps = steps[np.isfinite(steps)]
        if not len(steps):
            return []
        first, last = int(steps.min()), int(steps.max())
        metrics["first_step"] = first
        examples = recent_examples(rows_bad[rows_bad["step"] == rows_bad["step"].min()]) if rows_bad is not None else examples_in(ev, (first, first))
        what = ", ".join(k.removeprefix("nonfinite_") for k in metrics if k.startswith("nonfinite_"))
        if what == "grad_norm" and "update_skipped" in m.columns:
            skipped = set(as_float(m["step"])[as_float(m["update_skipped"]).fillna(0) > 0].astype(int))
            if set(steps.astype(int)) <= skipped:
                metrics["skipped_updates"] = len(skipped)
                return [self.finding(
                    "warning", f"The gradient was NaN/inf on {len(skipped)} step(s), first at step {first}; the "
                               "trainer skipped those updates (metric 'update_skipped'), so the weights stayed "
                               "finite. A rare skip is mixed-precision noise; frequent ones mean the numerics are "
                               "failing: lower the learning rate or max_grad_norm.",
                    confidence=1.0, steps=(first, last), examples=examples_in(ev, (first, first)), metrics=metrics)]
        return [self.finding(
            "critical", f"Non-finite values (NaN/inf) in {what}, first at step {first}. Training past this point "
                        "is meaningless: lower the learning rate, enable gradient clipping, check the reward "
                        "function for NaN, or use bf16 instead of fp16.",
            confidence=1.0, steps=(first, last), examples=examples, metrics=metrics)]

    def _training_rows(self, m: pd.DataFrame) -> np.ndarray:
        """Rows that are training logs (so a NaN there was logged): rows holding most non-eval columns,
        or rows holding nothing at all (only a NaN-valued log creates one)."""
        train_cols = [c for c in m.columns if c != "step" and not str(c).startswith("eval/")]
        eval_cols = [c for c in m.columns if str(c).startswith("eval/")]
        present = m[train_cols].notna().to_numpy() if train_cols else np.zeros((len(m), 0), dtype=bool)
        dense = present.mean(axis=1) >= self.params.dense_share if train_cols else np.zeros(len(m), dtype=bool)
        empty = ~present.any(axis=1) & (~m[eval_cols].notna().to_numpy().any(axis=1) if eval_cols else True)
        return dense | empty


# ------------------------------------------------------------------------------------------------ progress


def accuracy_progress(ev: Evidence, lo: int, hi: int, min_eval_points: int) -> tuple[pd.Series, str, bool] | None:
    """Accuracy over steps ``lo..hi`` as a progress signal: held-out greedy accuracy when it has ``min_eval_points``
    there, else strict train accuracy; with what it is and whether it is held-out. None when the run has neither."""
    evals = metric_series(ev.metrics, "eval/greedy_accuracy")
    if evals is not None and len(between(evals, lo, hi)) >= min_eval_points:
        return between(evals, lo, hi), "held-out greedy accuracy", True
    train = metric_or_rollout(ev, "accuracy", "correct")
    if train is None:
        return None
    return between(train.values, lo, hi), f"strict train accuracy ({train.source})", False


class Plateau(BuiltinDiagnostic):
    """Reward flat while accuracy is below the ceiling: learning has stalled.

    v2 (2026-11-28, issue 17): one window of the run's second half (``window_frac`` 0.5, ``flat_windows`` 1), and a
    reward counts as flat only when its fitted change lies half a standard error inside ±max_change
    (``noise_z`` 0.5). v1 asked for two flat quarter-run windows with the change alone; on a noisy reward each
    30-step window was a coin flip, and it missed decided plateaus. Scored on the tuning half of the labelled
    archive first (bench/log/12-detection-out-of-sample.md): recall 4/6 → 6/6 with no false positive under the archive's labels,
    5/13 → 10/13 (one false positive more) under labels that ignore noise; the held-out half after.

    v3 (2026-11-28, issue 17): a warning also needs accuracy decidedly not rising (``decided_z`` 1.0: its fitted gain
    over the window plus one standard error at most ``max_gain`` 0.03; held-out accuracy with ``min_eval_points``
    there, else strict train accuracy); a flat reward while noise leaves room for progress is an info. v2 warned on
    healthy runs whose 30-step second half could not tell a slow climb from a stall (held-out: 6 of 17 healthy runs,
    on labels noise leaves undecided). Tuning half: plateau recall 7/7 kept, the 4 healthy runs warned on an
    undecided label 0, mean first finding 76 → 106 steps; the same margin on the reward's change too lost 2 of 7.
    """

    name = "plateau"
    version = "3"
    symptom = "plateau"
    signal = ("Least-squares change of 'reward' (and of 'eval/greedy_accuracy' when logged) over the last W "
              "steps, W = max(min_steps, window_frac × run length), while accuracy (held-out, else train) is "
              "below a ceiling.")
    literature = ("Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base "
                  "Model?, arXiv 2504.13837 (RLVR gains saturate within the base model's reach).")
    needs = (NEED_REWARD,)
    reads = ("metric:eval/greedy_accuracy", "metric:accuracy", "rollout:correct")

    class Params(BaseParams):
        window_frac: float = Field(0.5, gt=0.0, le=0.5, description=(
            "W as a share of the run's steps (v2: the second half, as a person reads a curve; v1's quarter made "
            "two 30-step windows a coin flip on a noisy reward)."))
        min_steps: int = Field(30, ge=30, le=100_000, description="Smallest W (steps).")
        max_change: float = Field(0.05, gt=0.0, description="Fitted reward change over W at or below which (in absolute value) reward is flat.")
        max_eval_change: float = Field(0.05, gt=0.0, description="Fitted held-out accuracy change over W at or below which it is flat.")
        min_eval_points: int = Field(3, ge=2, description="Fewest eval points inside W for the held-out series to count.")
        ceiling: float = Field(0.95, gt=0.0, le=1.0, description="No plateau is called when accuracy is at or above this.")
        noise_z: float = Field(0.5, ge=0.0, le=5.0, description=(
            "Noise allowance: reward counts as flat only when its fitted change lies noise_z standard errors (the "
            "least-squares slope's) inside ±max_change, so that a window too noisy to call flat is not called flat. "
            "0 compares the fitted change alone."))
        flat_windows: int = Field(1, ge=1, le=4, description=(
            "Consecutive flat windows a warning needs: the latest W steps flat, and with 2 the W before them too "
            "(flat over the last 2W); fewer is an info. A warning also needs a run of at least max(2, this) × W steps, "
            "so that with 1 a run that learned and then stalled warns, while a run shorter than 2W only informs."))
        max_gain: float = Field(0.03, ge=0.0, le=1.0, description=(
            "Fitted accuracy gain over W (held-out with min_eval_points inside W, else strict train accuracy) at or "
            "below which accuracy is not rising; read only when decided_z > 0."))
        decided_z: float = Field(1.0, ge=0.0, le=5.0, description=(
            "v3: a warning needs accuracy decidedly not rising: its fitted gain over W plus this many of its standard "
            "errors at or below max_gain. A flat reward while noise leaves room for progress is an info. 0 = v2 (the "
            "reward test alone decides). 1.0 chosen on the tuning half of the labelled archive "
            "(bench/log/12-detection-out-of-sample.md); applying it to the reward's change as well lost 2 of 7 decided plateaus there."))

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        reward = metric_or_rollout(ev, "reward", "reward")
        if reward is None:
            return self.not_enough("metric 'reward' or rollout column 'reward'")
        s = reward.values
        W = max(p.min_steps, math.ceil(p.window_frac * len(s)))
        if len(s) < W:
            return self.not_enough(f"at least {W} steps of reward")
        flat, metrics = self._flat(ev, s.iloc[-W:])
        if not flat:
            return []
        # held-out greedy accuracy is the better ceiling signal: sampled train accuracy rarely nears 1.0
        acc = metric_or_rollout(ev, "eval/greedy_accuracy", None) or metric_or_rollout(ev, "accuracy", "correct")
        lo, hi = int(s.index[-W]), int(s.index[-1])
        if acc is not None:
            level = between(acc.values, lo, hi)
            level = float(level.mean()) if len(level) else float(acc.values.iloc[-1])
            metrics |= {"accuracy": level, "ceiling": p.ceiling}
            if level >= p.ceiling:
                return []
        k = p.flat_windows
        long = len(s) >= max(2, k) * W and (k == 1 or self._flat(ev, s.iloc[-k * W :])[0])
        if long:
            lo = int(s.index[-k * W])
        sev: Severity = "warning" if long else "info"
        if sev == "warning" and p.decided_z > 0:
            decided, more = self._decided(ev, lo, hi)
            metrics |= more
            sev = "warning" if decided else "info"
        metrics |= {"window_steps": W, "max_change": p.max_change}
        return [self.finding(
            sev, f"Reward has been flat over steps {lo}-{hi}" + (f" ({k} windows)" if long and k > 1 else "")
                 + f" (fitted change {metrics['reward_change']:+.3f}) and accuracy is below the ceiling: learning "
                 "has stalled. Change the curriculum (harder or easier prompts), the learning rate, or stop.",
            confidence=confidence(abs(metrics["reward_change"]), p.max_change, 0.0, 1.0 if long else 0.5),
            steps=(lo, hi), examples=examples_in(ev, (lo, hi)), metrics=metrics)]

    def _decided(self, ev: Evidence, lo: int, hi: int) -> tuple[bool, dict[str, float]]:
        """Whether noise could not hide progress (``decided_z``): the accuracy's fitted gain over ``lo..hi`` lies
        ``decided_z`` standard errors below ``max_gain`` (True when the run has no accuracy to read)."""
        p = self.params
        progress = accuracy_progress(ev, lo, hi, p.min_eval_points)
        if progress is None or len(progress[0]) < 2:
            return True, {}
        acc, held = progress[0], progress[2]
        gain, gain_se = change_over(acc, lo, hi), change_se_over(acc, lo, hi)
        more = {"accuracy_gain": gain, "accuracy_gain_se": gain_se, "max_gain": p.max_gain,
                "accuracy_gain_heldout": float(held)}
        # too few points to say how noisy the gain is (NaN): not decided
        return bool(np.isfinite(gain_se)) and gain + p.decided_z * gain_se <= p.max_gain, more

    def _flat(self, ev: Evidence, tail: pd.Series) -> tuple[bool, dict[str, float]]:
        p = self.params
        lo, hi = int(tail.index[0]), int(tail.index[-1])
        change = change_over(tail, lo, hi)
        metrics = {"reward_change": change}
        se = change_se_over(tail, lo, hi) if p.noise_z else 0.0
        if p.noise_z:
            metrics["reward_change_se"] = se
        flat = abs(change) + p.noise_z * (se if np.isfinite(se) else 0.0) <= p.max_change
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        if evals is not None:
            if len(between(evals, lo, hi)) >= p.min_eval_points:
                metrics["eval_change"] = change_over(evals, lo, hi)
                flat = flat and abs(metrics["eval_change"]) <= p.max_eval_change
        return flat, metrics



class LearnsNothing(BuiltinDiagnostic):
    """Added for issue 17: the seed-1 baseline run (bench/log/01-learning.md) trained 300 steps with a reward that
    wandered between 0.2 and 0.35 and held-out accuracy that ended where it started (34.6 % → 29.0 %), and no
    diagnostic said so: plateau needs a *flat* reward. This one asks the question directly — has held-out accuracy
    (else strict train accuracy) improved over the window? — and only while the reward still moves (a reward that
    is flat or constant is plateau's or dead_groups' case)."""

    name = "learns_nothing"
    version = "1"
    symptom = "learns_nothing"
    signal = ("Least-squares change of held-out accuracy ('eval/greedy_accuracy', with min_eval_points inside the "
              "window; else strict train accuracy) over the last W = max(min_steps, window_frac × run length) steps, "
              "while the per-step reward still varies (its standard deviation over W) and accuracy is below a ceiling.")
    literature = ("Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?, "
                  "arXiv 2504.13837 (RLVR that does not move held-out accuracy); Deep Reinforcement Learning that "
                  "Matters (Henderson et al.), arXiv 1709.06560 (seeds that do not learn).")
    needs = (NEED_REWARD,
             need("a progress signal", "metric:eval/greedy_accuracy", "metric:accuracy", "rollout:correct",
                  supply="held-out accuracy logged as 'eval/greedy_accuracy', or strict correctness (`--correctness "
                         "NAME`, `--map correct=COLUMN`)"))

    class Params(BaseParams):
        window_frac: float = Field(0.5, gt=0.0, le=1.0, description="W as a share of the run's steps.")
        min_steps: int = Field(100, ge=10, le=100_000, description="Smallest W (steps); shorter runs are not judged.")
        max_gain: float = Field(0.03, ge=0.0, le=1.0,
                                description="Fitted accuracy change over W at or below which nothing was learned.")
        min_eval_points: int = Field(4, ge=3, description="Fewest eval points inside W for held-out accuracy to be the "
                                     "progress signal (else strict train accuracy is).")
        min_reward_std: float = Field(0.02, ge=0.0, description="Standard deviation of the per-step reward over W at or "
                                      "above which the reward is noisy rather than flat.")
        ceiling: float = Field(0.95, gt=0.0, le=1.0, description="No finding when accuracy over W is at or above this.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        reward = metric_or_rollout(ev, "reward", "reward")
        s = reward.values
        W = max(p.min_steps, math.ceil(p.window_frac * len(s)))
        if len(s) < W:
            return self.not_enough(f"at least {W} steps of reward")
        lo, hi = int(s.index[-W]), int(s.index[-1])
        found = accuracy_progress(ev, lo, hi, p.min_eval_points)
        if found is None:
            return self.not_enough(f"{p.min_eval_points}+ points of 'eval/greedy_accuracy' within the last {W} steps "
                                   "or strict train accuracy (metric 'accuracy' or rollout 'correct')")
        progress, source, held = found
        if len(progress) < 2:
            return self.not_enough(f"accuracy at 2+ steps within the last {W} steps")
        gain = change_over(progress, lo, hi)
        level = float(progress.mean())
        noise = float(s.iloc[-W:].std())
        metrics = {"accuracy_change": gain, "max_gain": p.max_gain, "accuracy": level, "ceiling": p.ceiling,
                   "reward_std": noise, "min_reward_std": p.min_reward_std, "window_steps": W,
                   "points": len(progress)}
        if not np.isfinite(gain) or gain > p.max_gain or level >= p.ceiling or noise < p.min_reward_std:
            return []
        return [self.finding(
            "warning", f"{source[0].upper()}{source[1:]} did not improve over steps {lo}-{hi} (fitted change "
                       f"{gain:+.3f}, mean {level:.2f}) while the reward kept moving (std {noise:.3f}): the updates are "
                       "not turning into progress. Check the learning rate (too small does nothing, too large "
                       "thrashes), the warm start, and whether the reward tracks the task.",
            confidence=confidence(p.max_gain - gain, 0.0, p.max_gain + 0.05,
                                  support(len(progress), 2 * p.min_eval_points if held else W)),
            steps=(lo, hi), examples=examples_in(ev, (hi, hi)), metrics=metrics)]
