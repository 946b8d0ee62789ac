"""Is the mainline stuck? How many of its held-out answers its latest segment changed, and what may act on it.

Why: a recipe whose update is too small to change the policy (TRL's default learning rate 1e-6 on a policy that
trains at 3e-4) cannot show the effect of any change but one that enlarges the update. A reward weight, a group
scaling, an entropy mask or a data filter reshapes a gradient whose steps change nothing: in 10 branch steps at
1e-6 no greedy answer changed in any arm, and such backtests measure +0.000 exactly (countdown seed 1,
bench/RESULTS.md §7 session 22: round 1 spent its exploration on `scale_rewards` and `top_entropy_quantile`, and by
round 2 none was left for the learning rate, so the mainline stayed at 1e-6 and ended where the static recipe
does). So a round whose mainline is *stuck* backtests only changes that enlarge the update, re-tests of such
changes first.

**Movement** is the share of the decision split's problems whose greedy outcome (right or wrong) differs between
the start and the end of the round's segment: the segment's parent version's recorded outcomes (a segment, a
kept branch's look, or a merged branch's decision scoring) and the segment's own at its last step; for the
campaign's first segment, which evaluates its start, that first evaluation. Measured over 20 steps (session 21):
0-0.8 % from the flawed starts (lr 1e-6, arith and countdown), 17-29 % from the tuned ones whatever their net gain.

**Stuck** (spec ``backtest.stuck_share``; judged only when the threshold amounts to at least :data:`MIN_ANSWERS`
answers of the split): movement below that share per :data:`PER_STEPS` steps trained (pro rata:
a segment of 80 steps must change four times as many answers) while the segment had a training signal — at least
:data:`MIN_SIGNAL` of its groups with a reward spread (1 − ``frac_reward_zero_std``). Without a spread there is no
gradient to enlarge, and the remedies are those for dead groups, which stay allowed. Why pro rata: a segment
lengthened by the steps a backtest freed accumulates the drift of a tiny learning rate — at 1e-6 countdown changed
5 of 500 answers over 80 steps and 6 over 200, at or above a flat 1 % — while a moving policy changed 15-22 % over
110-140 steps.

**What enlarges the update** (:data:`STEP_SIZE_KNOBS`): a higher learning rate, more optimiser iterations per
generated batch, a shorter warm-up (whose ramp scales the rate down at the start).
"""

from __future__ import annotations

from typing import Any

from evotrainer.domain import PolicyVersion

# knob → the direction in which it enlarges the update a step makes (+1: a larger value, −1: a smaller one)
STEP_SIZE_KNOBS: dict[str, int] = {"optim.learning_rate": +1, "grpo.num_iterations": +1, "optim.warmup_steps": -1}
# share of a segment's groups that must have a reward spread for "no movement" to mean "too small a step"
MIN_SIGNAL = 0.1
# what a brain is told in a stuck round (the LLM prompt's line above its knob list)
STUCK_WHY = ("the policy is stuck (its greedy answers barely changed over the last segment although its groups had a "
             "reward spread): only a change that enlarges the update can show an effect; raise optim.learning_rate or "
             "grpo.num_iterations, or shorten optim.warmup_steps")
PER_STEPS = 20
# fewest answers the threshold may amount to: below it a split of n problems cannot tell a stuck policy from a
# slow one (0 changes of 16 problems in 2 steps is what a learning policy shows too)
MIN_ANSWERS = 3  # backtest.stuck_share is the share of answers that must change per this many steps trained


def enlarges_update(knob: str, old: Any, new: Any) -> bool:
    """Whether ``knob: old → new`` makes the policy's update larger (see :data:`STEP_SIZE_KNOBS`)."""
    sign = STEP_SIZE_KNOBS.get(knob)
    if sign is None or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new)):
        return False
    return (new - old) * sign > 0


def threshold(stuck_share: float, steps: int) -> float:
    """The share of answers that ``steps`` steps must change for a policy to count as moving."""
    return stuck_share * steps / PER_STEPS


def changed_share(start: list[int], end: list[int]) -> float:
    """Share of problems whose outcome differs between two evaluations of the same split."""
    if not start or len(start) != len(end):
        raise ValueError(f"outcomes of {len(start)} and {len(end)} problems cannot be compared")
    return sum(a != b for a, b in zip(start, end)) / len(end)


def _outcomes_at(home, run_name: str | None, step: int | None) -> list[int] | None:
    from evotrainer.evaluation import read_outcomes

    if not run_name or step is None:
        return None
    return read_outcomes(home / "jobs" / run_name, step)


def segment_movement(home, segment: PolicyVersion, parent: PolicyVersion | None) -> dict[str, Any] | None:
    """{"moved", "steps", "changed", "n"} over ``segment``'s training, or None when its start or end has no
    recorded per-problem outcomes (a run from before they were written, or a failed evaluation)."""
    from evotrainer.evaluation import eval_steps

    end = _outcomes_at(home, segment.run_name, segment.step)
    if parent is not None:
        start, start_step = _outcomes_at(home, parent.run_name, parent.step), parent.step
    else:  # the campaign's first segment evaluates its own start
        first = next((s for s in eval_steps(home / "jobs" / segment.run_name) if s < segment.step), None)
        start, start_step = _outcomes_at(home, segment.run_name, first), first
    if not end or not start or len(end) != len(start) or start_step is None:
        return None
    changed = sum(a != b for a, b in zip(start, end))
    return {"moved": round(changed_share(start, end), 6), "changed": changed, "n": len(end),
            "steps": segment.step - start_step}


def segment_signal(home, segment: PolicyVersion, start_step: int) -> float | None:
    """Share of the segment's groups with a reward spread (mean of 1 − ``frac_reward_zero_std`` over its steps
    after ``start_step``), or None when the metric was not recorded."""
    from evotrainer.evidence import read_metrics

    m = read_metrics(home / "jobs" / segment.run_name)
    if "frac_reward_zero_std" not in m:
        return None
    s = m.loc[(m["step"] > start_step) & (m["step"] <= segment.step), "frac_reward_zero_std"].dropna()
    return None if s.empty else float(1 - s.mean())


def judge(home, segment: PolicyVersion, parent: PolicyVersion | None, stuck_share: float) -> dict[str, Any]:
    """The round's movement verdict: ``stuck`` with the numbers and a reason in words (the ``movement`` event)."""
    mv = segment_movement(home, segment, parent)
    if mv is None:
        return {"stuck": False, "moved": None, "reason": "no per-problem outcomes at the segment's start and end"}
    signal = segment_signal(home, segment, segment.step - mv["steps"])
    limit = threshold(stuck_share, mv["steps"])
    msg: dict[str, Any] = {**mv, "signal": None if signal is None else round(signal, 4), "threshold": round(limit, 6)}
    moved = (f"{mv['changed']} of {mv['n']} decision-split answers ({mv['moved']:.1%}) changed over its "
             f"{mv['steps']} steps")
    if mv["moved"] >= limit:
        msg.update(stuck=False, reason=f"the mainline moves: {moved}")
    elif limit * mv["n"] < MIN_ANSWERS:
        msg.update(stuck=False, reason=f"too few problems or steps to tell: {moved}, and the threshold "
                                       f"({limit:.1%}) is {limit * mv['n']:.1f} answers, under {MIN_ANSWERS}")
    elif signal is not None and signal < MIN_SIGNAL:
        msg.update(stuck=False, reason=f"the mainline does not move ({moved}), but only {signal:.0%} of its groups "
                                       "had a reward spread: the signal is missing, not the step size")
    else:
        msg.update(stuck=True, reason=f"the mainline is stuck: {moved}, under {limit:.1%} (backtest.stuck_share "
                                      f"{stuck_share:g} per {PER_STEPS} steps)"
                                      + ("" if signal is None else f", while {signal:.0%} of its groups had a reward "
                                                                   "spread"))
    return msg
