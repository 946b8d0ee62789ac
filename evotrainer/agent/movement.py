"""Is the mainline stuck? How many of its held-out answers its latest segment changed, and what may act on it.

Why: a recipe whose update is too small to change the policy (TRL's default learning rate 1e-6 on a policy that
trains at 3e-4) cannot show the effect of any change but one that enlarges the update. A reward weight, a group
scaling, an entropy mask or a data filter reshapes a gradient whose steps change nothing: in 10 branch steps at
1e-6 no greedy answer changed in any arm, and such backtests measure +0.000 exactly (countdown seed 1,
bench/log/07-campaign-vs-static-baseline.md 2026-11-26: round 1 spent its exploration on `scale_rewards` and `top_entropy_quantile`, and by
round 2 none was left for the learning rate, so the mainline stayed at 1e-6 and ended where the static recipe
does). So a round whose mainline is *stuck* backtests only changes that enlarge the update, re-tests of such
changes first.

**Movement** is the share of the decision split's problems whose greedy outcome (right or wrong) differs between
the start and the end of the round's segment: the segment's parent version's recorded outcomes (a segment, a
kept branch's look, or a merged branch's decision scoring) and the segment's own at its last step; for the
campaign's first segment, which evaluates its start, that first evaluation.

**Stuck** (spec ``backtest.stuck_share``, 5 %; judged only when that share amounts to at least :data:`MIN_ANSWERS`
answers of the split): movement below that share while the segment had a training signal — at least
:data:`MIN_SIGNAL` of its groups with a reward spread (1 − ``frac_reward_zero_std``). Without a spread there is no
gradient to enlarge, and the remedies are those for dead groups, which stay allowed. The share is flat, whatever
the segment's length, because movement does not grow with steps: it saturates where a learning policy's answers
flip back and forth. Measured (bench/log/07-campaign-vs-static-baseline.md, 2026-11-26 and 2026-11-27), TRL's default 1e-6 changed 0-0.8 % of
arith's and countdown's answers in 20 steps, 1.0 % in 80 and 1.2 % in 200, and 0.4-1.8 % of agentic's in 20 (a
3× raise, 2.8 %); working learning rates changed 8-21 % in 20-30 branch steps and 15-22 % over segments of
50-200, tuned recipes 17-29 % in 20. The first versions failed both ways: a flat 1 % called countdown's 5 of 500
answers over 80 steps at 1e-6 moving, and 1 % per 20 steps pro rata called agentic's 1.8 % at 1e-6 moving.

When ``frac_reward_zero_std`` was not recorded (a run from elsewhere), the movement alone decides.

**What enlarges the update** (``config.harness.STEP_SIZE_KNOBS``): a higher learning rate, more optimiser iterations per
generated batch. (Not a shorter warm-up: a fork does not repeat its lineage's warm-up, so every branch and later
segment would train exactly as before.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evotrainer.agent.state import segment_id, segment_start
from evotrainer.core.domain import PolicyVersion
from evotrainer.evidence.model import read_metrics
from evotrainer.store import NotFound
from evotrainer.training.evaluation import eval_steps, read_outcomes

if TYPE_CHECKING:
    from evotrainer.agent.state import CampaignContext

# share of a segment's groups that must have a reward spread for "no movement" to mean "too small a step"
MIN_SIGNAL = 0.1
# fewest answers the stuck share may amount to: below it a split of n problems cannot tell a stuck policy from a
# moving one (0 changes of 16 problems in 2 steps is what a learning policy shows too)
MIN_ANSWERS = 3
# what a brain is told in a stuck round (the LLM prompt's line above its knob list)
STUCK_WHY = ("the policy is stuck (its greedy answers barely changed over the last segment although its groups had a "
             "reward spread): only a change that enlarges the update can show an effect; raise optim.learning_rate")


def changed_share(start: list[int], end: list[int]) -> float:
    """Share of problems whose outcome differs between two evaluations of the same split."""
    if not start or len(start) != len(end):
        raise ValueError(f"outcomes of {len(start)} and {len(end)} problems cannot be compared")
    return sum(a != b for a, b in zip(start, end)) / len(end)


def outcomes_at(home: Path, run_name: str | None, step: int | None) -> list[int] | None:
    """A job's recorded per-problem outcomes at ``step`` (None when there is no such run, step or evaluation)."""
    if not run_name or step is None:
        return None
    return read_outcomes(home / "jobs" / run_name, step)


def segment_movement(home: Path, segment: PolicyVersion, parent: PolicyVersion | None) -> dict[str, Any] | None:
    """{"moved", "steps", "changed", "n"} over ``segment``'s training, or None when its start or end has no
    recorded per-problem outcomes (a run from before they were written, or a failed evaluation)."""
    end = outcomes_at(home, segment.run_name, segment.step)
    if parent is not None and parent.run_name:
        start, start_step = outcomes_at(home, parent.run_name, parent.step), parent.step
    else:  # the campaign's first segment, or one from the base policy (no run), evaluates its own start
        first = next((s for s in eval_steps(home / "jobs" / segment.run_name) if s < segment.step), None)
        start, start_step = outcomes_at(home, segment.run_name, first), first
    if not end or not start or len(end) != len(start) or start_step is None:
        return None
    changed = sum(a != b for a, b in zip(start, end))
    return {"moved": round(changed_share(start, end), 6), "changed": changed, "n": len(end),
            "steps": segment.step - start_step}


def segment_signal(home: Path, segment: PolicyVersion, start_step: int) -> float | None:
    """Share of the segment's groups with a reward spread (mean of 1 − ``frac_reward_zero_std`` over its steps
    after ``start_step``), or None when the metric was not recorded."""
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
    msg: dict[str, Any] = {**mv, "signal": None if signal is None else round(signal, 4),
                           "threshold": round(stuck_share, 6)}
    moved = (f"{mv['changed']} of {mv['n']} decision-split answers ({mv['moved']:.1%}) changed over its "
             f"{mv['steps']} steps")
    if mv["moved"] >= stuck_share:
        msg.update(stuck=False, reason=f"the mainline moves: {moved}")
    elif stuck_share * mv["n"] < MIN_ANSWERS:
        msg.update(stuck=False, reason=f"too few problems to tell: {moved}, and backtest.stuck_share "
                                       f"({stuck_share:.1%}) is {stuck_share * mv['n']:.1f} answers, under "
                                       f"{MIN_ANSWERS}")
    elif signal is not None and signal < MIN_SIGNAL:
        msg.update(stuck=False, reason=f"the mainline does not move ({moved}), but only {signal:.0%} of its groups "
                                       "had a reward spread: the signal is missing, not the step size")
    else:
        msg.update(stuck=True, reason=f"the mainline is stuck: {moved}, under backtest.stuck_share "
                                      f"{stuck_share * 100:g}%"
                                      + ("" if signal is None else f", while {signal:.0%} of its groups had a reward "
                                                                   "spread"))
    return msg


def round_movement(ctx: CampaignContext, rnd: int) -> dict[str, Any] | None:
    """Round ``rnd``'s movement verdict (:func:`judge`, spec ``backtest.stuck_share``), judged once on the round's
    segment and kept as a ``movement`` event, so a resumed round reads the same verdict. None when stuck rounds are
    off (``stuck_share`` null) or the round has no segment of its own (nothing trained yet)."""
    for e in ctx.store.events(ctx.campaign_id, kind="movement"):
        if e.message.get("round") == rnd:
            return e.message
    share = ctx.spec.backtest.stuck_share
    if share is None:
        return None
    try:
        seg = ctx.store.get_policy_version(segment_id(ctx.campaign_id, rnd))
    except NotFound:
        return None
    parent = segment_start(ctx.store, seg)
    verdict = {"round": rnd, **judge(ctx.home, seg, parent, share)}
    ctx.store.log_event(ctx.campaign_id, "movement", verdict)
    ctx.log(f"round {rnd}: {verdict['reason']}" + ("; only changes that enlarge the update are backtested"
                                                   if verdict["stuck"] else ""))
    return verdict


def round_stuck(ctx: CampaignContext, rnd: int) -> bool:
    """Whether round ``rnd``'s mainline is stuck (:func:`round_movement`); a round without a verdict is not."""
    verdict = round_movement(ctx, rnd)
    return bool(verdict and verdict.get("stuck"))


def moves(verdict: dict[str, Any] | None) -> bool:
    """Whether a movement verdict measured the mainline moving: at least ``stuck_share`` of its answers changed
    (not merely "not stuck", which a split too small to tell, or a segment without a signal, also is)."""
    return bool(verdict) and verdict.get("moved") is not None and verdict.get("threshold") is not None \
        and verdict["moved"] >= verdict["threshold"]

