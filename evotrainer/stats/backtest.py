"""Backtest statistics and the decision rule: is the one change really better, and is it honest?

A backtest forks control (current harness) and treatment (current + one change) from the same policy
checkpoint with the same seeds and step budget, so per-seed results pair up (and, since a seed fixes the
data order, both arms see the same prompts: common random numbers). Every branch is evaluated on the same
held-out problems (the decision split), so results also pair up problem by problem.

**The effect and its interval.** The effect is the mean over seeds and problems of treatment − control
correctness. With per-problem outcomes its standard error has two parts, one for the few training seeds
and one for the sample of problems (a fixed problem set shared by every seed is itself a sample of the
task): SE² = var(per-seed effects)/S + var(per-problem effects)/P, with Welch–Satterthwaite degrees of
freedom; each part also carries the seed × problem residual, so the sum is conservative. Without
per-problem outcomes it is the paired t interval over seeds (few seeds, so a bootstrap would only resample
three numbers).

**Sequential looks** (``looks`` K > 1): every branch is evaluated at K evenly spaced steps, and a proposal
stops as soon as its answer is known. Efficacy uses alpha spending with the Kim–DeMets power family
(ρ = 3, close to O'Brien–Fleming: little error spent early, most at the last look): look j may promote only
when the lower bound of a two-sided (1 − α·f_j) interval clears ``min_effect``, where α = 1 − confidence and
f_j = (j/K)³ − ((j−1)/K)³. The looks are combined by the union (Bonferroni) bound, which holds whatever the
dependence between looks, so the false-promotion rate stays at or below α/2, the one-sided error of the
fixed-horizon rule (simulated in ``tests/test_campaign_units.py``). Futility is non-binding: at an interim
look a proposal whose ``confidence`` interval, projected to the last look, lies wholly below the futility
threshold (``futility_effect``, by default ``min_effect``: a gain not worth having) is rejected early; stopping
for futility can only lower the false-promotion rate, so the threshold may sit above ``min_effect``. With K = 1
the rule is the fixed-horizon one.

**Unplanned last look.** A backtest can end before its last planned look for a reason outside the proposal's
data: the campaign's budget (or its exploration share) has no room for the next look. That look is then the final
analysis, as in Lan–DeMets alpha spending when a trial ends early for administrative reasons: it may spend all the
error the earlier looks left, α·(1 − ((j−1)/K)^ρ), and a proposal whose interval still straddles the minimum effect
there is inconclusive, unless ``backtest.spent_estimate`` decides it on its estimate
(``evotrainer/stats/rules/estimate.py``: no later round can re-test it either). The union bound is unchanged (the
levels used along any path still sum to at most α), so the false-promotion rate stays at or below α/2 (simulated with
forced stops in ``tests/test_campaign_units.py``).
One caveat: whether the budget has room depends on how many arms are still open, so on the other proposals'
decisions, which share this proposal's control branches; the simulation covers a stop independent of the data.
Without it a change budget-stopped at look 2 of 3 was judged at the 94.8 % level of a look that expected another
after it, and the 70 % of the error kept for the last look was never spent (countdown, bench/log/07-campaign-vs-static-baseline.md v3).

**Why futility projects.** Unlike a clinical trial, a later look does not add observations: every look scores
the same problems, and what changes is the effect itself, which a training change builds up step by step (a
learning rate raised from 1e-6 to 3e-6 moved held-out accuracy by +0.005 after 10 steps, and by about +0.03
after 110). Judged on the look's own interval, such a change read as "not worth having" at the first look and
was refuted for good. So with ``project_futility`` (the default) the interval's upper end is scaled by K/j, the
steps the branch will have trained at the last look over those it has now (linear growth: the most the
effect can be expected to reach); a change whose projected upper end is still below the threshold stops. A
change that leaves the run exactly as it was (an interval of zero width at zero) still stops at the first
look, and a change whose effect is there at once is promoted early all the same.

The outcomes:

- **failed**: fewer than two complete pairs (a branch crashed or produced NaN);
- **blocked**: a treatment branch tripped the gate and the treatment scored higher on average — on the
  held-out evaluation, or on the training reward the change was optimising (a trap such as a leaking tool
  or a reward on visible tests raises the training reward while held-out accuracy, which the trap cannot
  reach, stays flat or drops). A high score reached by an exploit must never be promoted, and the record
  says it was blocked, not merely unhelpful; a trip stops the proposal at the look it shows up;
- **promote**: the look's efficacy interval lies above ``min_effect`` and every treatment branch passed the gate;
  or, at a look the budget made the last, the estimate (``backtest.spent_estimate``, ``stats.rule``);
- **reject** (refuted): the mean effect is ≤ 0 or the interval lies entirely below the futility threshold
  (at the last look), or the futility rule fires (earlier);
- **inconclusive**: anything else at the last look (the interval straddles ``min_effect``).

Each outcome's rule is a file of ``evotrainer/stats/rules/`` (gate, superiority, the estimate, futility, the last
look), tried in that order by :func:`decide`.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone

from evotrainer.core.domain import BacktestStats, BranchResult, Decision
from evotrainer.stats.rules import LOOK_RULES, WAIT, Look

SPENDING_RHO = 3.0  # Kim–DeMets power-family exponent: 3 spends about as O'Brien–Fleming boundaries do


def spending(looks: int, rho: float = SPENDING_RHO) -> list[float]:
    """Share of the error each look may spend: increments of (j/K)^rho (they sum to 1)."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return [(j / looks) ** rho - ((j - 1) / looks) ** rho for j in range(1, looks + 1)]


def effect_interval(diffs_by_seed: list[list[float]], confidence: float) -> tuple[float, float, float, float]:
    """(effect, se, df, half-width) of the mean of a seeds × problems table of treatment − control differences.

    One column per seed is the seed-only case (paired t over seeds). See the module docstring.
    """
    import numpy as np
    from scipy import stats

    rows = [r for r in diffs_by_seed if len(r)]
    if not rows:
        raise ValueError("effect_interval needs at least one seed")
    if len({len(r) for r in rows}) != 1:
        raise ValueError("every seed must have outcomes on the same problems")
    y = np.asarray(rows, dtype=float)
    s, p = y.shape
    effect = float(y.mean())
    if s < 2:
        return effect, math.inf, 0.0, math.inf
    v_seed = float(y.mean(axis=1).var(ddof=1)) / s
    v_prob = float(y.mean(axis=0).var(ddof=1)) / p if p > 1 else 0.0
    se2 = v_seed + v_prob
    if se2 <= 1e-18:
        return effect, 0.0, float(s - 1), 0.0
    denom = v_seed ** 2 / (s - 1) + (v_prob ** 2 / (p - 1) if p > 1 else 0.0)
    df = se2 ** 2 / denom if denom > 0 else float(s - 1)
    se = math.sqrt(se2)
    return effect, se, df, float(stats.t.ppf(0.5 + confidence / 2, df=df)) * se


def decide(proposal_id: str, control: list[BranchResult], treatment: list[BranchResult], min_effect: float,
           confidence: float, *, look: int = 1, looks: int = 1, step: int | None = None,
           outcomes: dict[tuple[str, int], list[int]] | None = None, undecided: str | None = None,
           futility_effect: float | None = None, project_futility: bool = True, last: bool = False,
           by_estimate: bool = False) -> Decision | None:
    """Apply the decision rule to one proposal's branches (matched by seed) at look ``look`` of ``looks``.

    ``outcomes`` maps (``"control"`` or the proposal id, seed) to each branch's per-problem correctness at this
    look; without it the interval is over seeds only. At an interim look where the proposal goes on, returns
    None, or, when ``undecided`` names an outcome (the backtest ended there for another reason), a decision
    with that outcome and the look's numbers.

    ``last``: the backtest ends at this look for a reason that is not this proposal's data (the budget ran out
    for its next look). The look is then the final analysis, and it spends all the error the looks before it
    left unspent (see "Unplanned last look" in the module docstring).

    ``by_estimate``: an unplanned last look (``last``) promotes on the estimate (``evotrainer/stats/rules/estimate.py``).
    """
    now = datetime.now(timezone.utc)
    planned_final = look >= looks
    final = planned_final or last
    futile = min_effect if futility_effect is None else futility_effect
    ctrl = {b.seed: b for b in control if b.status == "finished" and b.eval_accuracy is not None}
    treat = {b.seed: b for b in treatment if b.status == "finished" and b.eval_accuracy is not None}
    seeds = sorted(set(ctrl) & set(treat))
    failed = [f"{b.role} seed {b.seed}: {b.error or 'no held-out accuracy'}" for b in [*control, *treatment]
              if b.seed not in seeds and (b.status != "finished" or b.eval_accuracy is None)]
    if len(seeds) < 2:
        return Decision(proposal_id=proposal_id, outcome="failed", at=now,
                        reasons=[f"only {len(seeds)} complete pair(s) of branches", *failed])
    # a last look, planned or not, spends its own share and every later look's (none, for the planned one)
    shares = spending(looks)
    share = sum(shares[look - 1:]) if final else shares[look - 1]
    alpha = (1 - confidence) * share  # two-sided error this look may spend on efficacy
    level = 1 - alpha
    per_problem = outcomes is not None and all(("control", s) in outcomes and (proposal_id, s) in outcomes
                                               for s in seeds)
    if per_problem:
        table = [[t - c for c, t in zip(outcomes[("control", s)], outcomes[(proposal_id, s)])] for s in seeds]
        method = "paired over seeds and problems (Welch–Satterthwaite t)"
    else:
        table = [[treat[s].eval_accuracy - ctrl[s].eval_accuracy] for s in seeds]
        method = "paired-t"
    if looks > 1:
        method += f", look {look} of {looks}, alpha spending (Kim–DeMets rho={SPENDING_RHO:g}, Bonferroni)"
    effect, se, df, half = effect_interval(table, level)
    _, _, _, half_futility = effect_interval(table, confidence)
    st = BacktestStats(
        n_pairs=len(seeds), effect=round(effect, 6), ci_low=round(effect - half, 6) if math.isfinite(half) else -math.inf,
        ci_high=round(effect + half, 6) if math.isfinite(half) else math.inf, confidence=round(level, 6), method=method,
        control_mean=round(statistics.fmean(ctrl[s].eval_accuracy for s in seeds), 6),
        treatment_mean=round(statistics.fmean(treat[s].eval_accuracy for s in seeds), 6),
        look=look, looks=looks, step=step, se=round(se, 6) if math.isfinite(se) else None, df=round(df, 3))
    gate_reasons = [f"seed {s}: {r}" for s in seeds for r in treat[s].gate_reasons if not treat[s].gate_passed]
    pct = f"{level:.1%}" if looks > 1 else f"{level:.0%}"
    where = f" at look {look}/{looks}" + (f" (step {step})" if step is not None else "") if looks > 1 else ""
    summary = (f"held-out effect {st.effect:+.3f} ({pct} CI {st.ci_low:+.3f}..{st.ci_high:+.3f}, {st.n_pairs} paired "
               f"seeds; control {st.control_mean:.3f}, treatment {st.treatment_mean:.3f}){where}")
    train = [(ctrl[s].train_reward, treat[s].train_reward) for s in seeds
             if ctrl[s].train_reward is not None and treat[s].train_reward is not None]
    at = Look(proposal_id=proposal_id, look=look, looks=looks, planned_final=planned_final, final=final, last=last,
              min_effect=min_effect, futile=futile, confidence=confidence, project_futility=project_futility,
              undecided=undecided, by_estimate=by_estimate, treatment=treatment,
              treat=treat,
              seeds=seeds, stats=st, effect=effect, half_futility=half_futility, gate_reasons=gate_reasons,
              train_gain=statistics.fmean(t - c for c, t in train) if train else None,
              reasons=[summary, *([f"{len(failed)} branch(es) failed: " + "; ".join(failed)] if failed else [])],
              at=now)
    for rule in LOOK_RULES:  # the first rule that decides (or says wait) answers (evotrainer/stats/rules/)
        verdict = rule.at_look(at)
        if verdict is WAIT:
            return None
        if verdict is not None:
            return verdict
    raise AssertionError("the last look rule always decides")


def regression_margin(best: float, current: float, n: int, confidence: float, min_effect: float) -> float:
    """Drop in held-out accuracy below which a mainline's decline from its best version is evaluation noise.

    Both accuracies are proportions over the same ``n`` held-out problems; the two-proportion standard error
    ignores that pairing, which overstates the noise. It does not cover the other bias: ``best`` is the
    largest of several noisy accuracies, so it sits above that version's true accuracy, and the check runs
    after every segment and round; a higher ``confidence`` pays for both. The margin is z(confidence) such
    errors, and never less than ``min_effect``: a decline a backtest could not call a gain is not a
    regression either.
    """
    from statistics import NormalDist

    if n < 1:
        raise ValueError(f"regression_margin needs n >= 1 held-out problems, got {n}")
    se = math.sqrt((best * (1 - best) + current * (1 - current)) / n)
    return max(min_effect, NormalDist().inv_cdf(confidence) * se)
