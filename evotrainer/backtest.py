"""Backtest statistics and the decision rule: is the one change really better, and is it honest?

A backtest forks control (current harness) and treatment (current + one change) from the same policy
checkpoint with the same seeds and step budget, so per-seed results pair up. The effect is the mean of
the paired differences in held-out accuracy; its confidence interval is a paired t interval (few seeds,
so a bootstrap would only resample three numbers). Then:

- **failed**: fewer than two complete pairs (a branch crashed or produced NaN);
- **blocked**: a treatment branch tripped the gate and the treatment scored higher on average — on the
  held-out evaluation, or on the training reward the change was optimising (a trap such as a leaking tool
  or a reward on visible tests raises the training reward while held-out accuracy, which the trap cannot
  reach, stays flat or drops). A high score reached by an exploit must never be promoted, and the record
  says it was blocked, not merely unhelpful;
- **promote**: the whole interval lies above ``min_effect`` and every treatment branch passed the gate;
- **reject** (refuted): the mean effect is ≤ 0 or the interval lies entirely below ``min_effect``;
- **inconclusive**: anything else (the interval straddles ``min_effect``).
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone

from evotrainer.agent.schemas import BacktestStats, BranchResult, Decision


def paired_stats(control: list[float], treatment: list[float], confidence: float) -> BacktestStats:
    """Paired t interval of mean(treatment - control). With one pair the interval is unbounded."""
    from scipy import stats

    if len(control) != len(treatment) or not control:
        raise ValueError("paired_stats needs equally many control and treatment values, at least one")
    diffs = [t - c for c, t in zip(control, treatment)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    if n < 2:
        lo, hi = -math.inf, math.inf
    else:
        sd = statistics.stdev(diffs)
        half = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1)) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    return BacktestStats(
        n_pairs=n, effect=round(mean, 6), ci_low=round(lo, 6) if math.isfinite(lo) else lo,
        ci_high=round(hi, 6) if math.isfinite(hi) else hi, confidence=confidence, method="paired-t",
        control_mean=round(statistics.fmean(control), 6), treatment_mean=round(statistics.fmean(treatment), 6),
    )


def decide(proposal_id: str, control: list[BranchResult], treatment: list[BranchResult], min_effect: float,
           confidence: float) -> Decision:
    """Apply the decision rule to one proposal's branches (matched by seed)."""
    now = datetime.now(timezone.utc)
    ctrl = {b.seed: b for b in control if b.status == "finished" and b.eval_accuracy is not None}
    treat = {b.seed: b for b in treatment if b.status == "finished" and b.eval_accuracy is not None}
    seeds = sorted(set(ctrl) & set(treat))
    failed = [f"{b.role} seed {b.seed}: {b.error or 'no held-out accuracy'}" for b in [*control, *treatment]
              if b.seed not in seeds and (b.status != "finished" or b.eval_accuracy is None)]
    if len(seeds) < 2:
        return Decision(proposal_id=proposal_id, outcome="failed", at=now,
                        reasons=[f"only {len(seeds)} complete pair(s) of branches", *failed])
    st = paired_stats([ctrl[s].eval_accuracy for s in seeds], [treat[s].eval_accuracy for s in seeds], confidence)
    gate_reasons = [f"seed {s}: {r}" for s in seeds for r in treat[s].gate_reasons if not treat[s].gate_passed]
    pct = f"{confidence:.0%}"
    summary = (f"held-out effect {st.effect:+.3f} ({pct} CI {st.ci_low:+.3f}..{st.ci_high:+.3f}, {st.n_pairs} paired "
               f"seeds; control {st.control_mean:.3f}, treatment {st.treatment_mean:.3f})")
    reasons = [summary, *([f"{len(failed)} branch(es) failed: " + "; ".join(failed)] if failed else [])]
    train = [(ctrl[s].train_reward, treat[s].train_reward) for s in seeds
             if ctrl[s].train_reward is not None and treat[s].train_reward is not None]
    train_gain = statistics.fmean(t - c for c, t in train) if train else None
    if gate_reasons and (st.effect > 0 or (train_gain is not None and train_gain > 0)):
        outcome = "blocked"
        higher = "held-out accuracy" if st.effect > 0 else f"training reward ({train_gain:+.3f})"
        reasons.append(f"treatment scored higher ({higher}) but tripped the gate")
    elif gate_reasons:
        outcome = "reject"
        reasons.append("treatment tripped the gate and did not score higher")
    elif st.ci_low > min_effect:
        outcome = "promote"
        reasons.append(f"the whole interval is above the minimum effect {min_effect:+.3f}")
    elif st.effect <= 0 or st.ci_high < min_effect:
        outcome = "reject"
        reasons.append(f"no improvement beyond {min_effect:+.3f}")
    else:
        outcome = "inconclusive"
        reasons.append(f"the interval straddles the minimum effect {min_effect:+.3f}")
    return Decision(proposal_id=proposal_id, outcome=outcome, reasons=reasons, stats=st, gate_reasons=gate_reasons,
                    at=now)


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
