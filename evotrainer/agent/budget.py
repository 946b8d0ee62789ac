"""How a campaign spends its steps: the exploration mode and its allowance, the look budget of a backtest, and
whether this is the last round.
"""

from __future__ import annotations

import math
from typing import Any

from evotrainer.agent.mainline import _start_selection
from evotrainer.agent.movement import (
    moves,
    round_movement,
)
from evotrainer.agent.runs import _remaining
from evotrainer.agent.state import CampaignContext, CampaignState
from evotrainer.config.harness import (
    HarnessSpec,
)
from evotrainer.core.domain import PolicyVersion


def _gain_se(before: float, after: float, n: int) -> float:
    """Standard error of a selection-split gain: two independent binomial samples of ``n`` problems (conservative:
    the split's problems are the same)."""
    return math.sqrt(max(before * (1 - before) + after * (1 - after), 1e-12) / n)


HEALTHY_Z = 2.0  # standard errors by which the mainline must beat the base policy to count as learning


def _explore_mode(ctx: CampaignContext, state: CampaignState, rnd: int, findings: list,
                  harness: HarnessSpec) -> None:
    """Judge once per round whether the run is healthy, for ``budget.healthy_explore_share``; an ``explore_mode``
    event keeps the verdict and the round's exploration allowance (:func:`_allowance` reads it, so a resumed round
    keeps it).

    Healthy: no finding at warning or critical, and either the mainline's selection-split accuracy is above the
    base policy's by more than :data:`HEALTHY_Z` standard errors (two independent binomial samples of ``eval.n``),
    or the round's segment moved the policy (at least ``backtest.stuck_share`` of the decision split's answers
    changed: :func:`evotrainer.agent.movement.round_movement`) and left it no more than :data:`HEALTHY_Z` standard
    errors below the base.

    Why the second way: after a first segment of 20 steps a tuned recipe can be flat on the selection split while a
    fifth to a quarter of its answers change. Countdown's tuned recipe read +0.6, −0.8 and −0.3 s.e. there on three
    seeds, with 20-27 % of its answers changed and no finding; judged troubled, its rounds spent 90-160 of 400
    steps on branches that promoted nothing and ended 1.6 points below the static recipe on 3000 problems (90 % t
    −2.8..−0.3; bench/log/07-campaign-vs-static-baseline.md, 2026-11-27). A recipe that moves and has no warning is training, not failing;
    a stuck one (the demo's 1e-6: under 5 % of answers change) stays troubled, as does one that moves and falls.
    (Session 22 measured this rule once and reverted it, on one seed that ended 1.8 points lower; then every
    campaign's path differed from the static run's after its first fork, and that seed's difference was the path's,
    not the rule's.)
    """
    budget = ctx.spec.budget
    if budget.healthy_explore_share is None or any(
            e.message.get("round") == rnd for e in ctx.store.events(ctx.campaign_id, kind="explore_mode")):
        return
    serious = sorted({f.symptom for f in findings if f.severity in ("warning", "critical")
                      and f.symptom != "diagnostic_error"})
    pv = ctx.store.get_policy_version(state["mainline"]) if state.get("mainline") else None
    before = _start_selection(ctx, pv, harness) if pv is not None else None  # scored (once) at round 0 in any case
    after = pv.selection_accuracy if pv is not None else None
    msg: dict[str, Any] = {"round": rnd, "healthy": False, "before": before, "after": after}
    if serious:
        msg["reason"] = f"finding(s) at warning or critical: {', '.join(serious)}"
    elif before is None or after is None:
        msg["reason"] = "no selection-split score of the start or the mainline to judge it by"
    else:
        se = _gain_se(before, after, ctx.spec.eval.n)
        z = (after - before) / se
        mv = round_movement(ctx, rnd) if z <= HEALTHY_Z else None
        moving = moves(mv)
        msg.update(se=round(se, 6), healthy=z > HEALTHY_Z or (moving and z >= -HEALTHY_Z))
        if mv is not None and mv.get("moved") is not None:
            msg["moved"] = mv["moved"]
        how = ("learns" if z > HEALTHY_Z else "moves, not 2 s.e. below the start" if msg["healthy"]
               else "moves but is over 2 s.e. below the start" if moving else "has not learned")
        msg["reason"] = (f"the mainline {how}: selection split {before:.3f} at the start → {after:.3f} ({z:+.1f} s.e.)"
                         + (f"; {mv['moved']:.1%} of the decision split's answers changed over its segment"
                            if moving else ""))
    share = budget.healthy_explore_share if msg["healthy"] else budget.explore_share
    msg.update(share=share, allowance=share * budget.total_steps)
    ctx.store.log_event(ctx.campaign_id, "explore_mode", msg)
    ctx.log(f"round {rnd}: {'healthy' if msg['healthy'] else 'troubled'} ({msg['reason']}): branches the mainline "
            f"does not keep may take {msg['allowance']:g} steps in all (share {share:g})")


def _allowance(ctx: CampaignContext, rnd: int | None) -> tuple[float, str]:
    """Round ``rnd``'s exploration allowance in steps (discards of all rounds so far included), and what set it;
    ``rnd`` None: the latest judged round's."""
    budget = ctx.spec.budget
    modes = [e.message for e in ctx.store.events(ctx.campaign_id, kind="explore_mode")]
    if rnd is None and modes:
        rnd = max(m["round"] for m in modes)
    for m in modes:
        if m.get("round") == rnd and m.get("healthy"):
            return float(m["allowance"]), (f"budget.healthy_explore_share {m['share']:g} × {budget.total_steps} "
                                           "(a healthy round)")
    return budget.explore_share * budget.total_steps, f"budget.explore_share {budget.explore_share:g} × {budget.total_steps}"


def _look_budget(ctx: CampaignContext, rnd: int, mainline: PolicyVersion, open_arms: int,
                 earlier_arms: list[int]) -> str | None:
    """Why the next look of round ``rnd``'s backtest cannot run (budget, exploration share), or None when it can.

    ``open_arms`` arms (the control and the open proposals) would each train ``seeds`` branches one look further;
    ``earlier_arms`` lists how many arms trained at each earlier look. The count is deterministic (planned legs,
    not the ledger's partial state), so a re-run after ``kill -9`` takes the same path. Steps that go to branches
    the mainline will not keep are at most every branch of the look but one; with what earlier rounds and looks
    already discarded they must fit in ``budget.explore_share`` of the budget.
    """
    b, budget = ctx.spec.backtest, ctx.spec.budget
    leg = b.branch_steps // b.looks
    prefix = f"{ctx.campaign_id}__r{rnd:02d}__"
    before = sum(e.steps for e in ctx.store.ledger(ctx.campaign_id)
                 if not (e.kind == "branch" and (e.run_name or "").startswith(prefix)))
    so_far = sum(earlier_arms) * b.seeds * leg
    cost = open_arms * b.seeds * leg
    remaining = budget.total_steps - before - so_far
    if remaining < cost:
        return f"its next look needs {cost} steps and {remaining} remain"
    floor = budget.final_share * budget.total_steps
    if not earlier_arms and remaining - cost < floor:
        return (f"after its first look ({cost} steps) {remaining - cost} would remain, under budget.final_share "
                f"{budget.final_share:g} × {budget.total_steps} = {floor:g} kept for the mainline to use what it decides")
    allowance, set_by = _allowance(ctx, rnd)
    wasted = before - mainline.step + so_far - len(earlier_arms) * leg  # the kept branch's looks are not waste
    discard = cost - leg
    if wasted + discard > allowance:
        return (f"its next look could discard {discard} steps beside the {wasted} already outside the mainline, over "
                f"{set_by} = {allowance:g}")
    return None


def _explore_spent(ctx: CampaignContext, mainline: PolicyVersion | None, steps: int = 0) -> bool:
    """True when not even one look of a one-proposal backtest fits the exploration share any more (the healthy
    share when the latest round was judged healthy), or would fit after a segment of ``steps`` only by leaving less
    than ``budget.final_share`` of the budget after it."""
    if mainline is None:
        return False
    b, budget = ctx.spec.backtest, ctx.spec.budget
    leg = b.branch_steps // b.looks
    look = 2 * b.seeds * leg
    wasted = ctx.store.ledger_total(ctx.campaign_id) - mainline.step
    # the latest round's verdict decides: a healthy run whose healthy share is spent trains the rest, as a troubled
    # one does once explore_share is spent
    if wasted + look - leg > _allowance(ctx, None)[0]:
        return True
    return _remaining(ctx) - steps - look < budget.final_share * budget.total_steps


def _last_round(ctx: CampaignContext, mainline: PolicyVersion, reset: bool, streak: int) -> bool:
    """Whether no round follows this distill's: fewer steps are left than a segment needs, or the next segment
    trains the rest of the budget and the campaign then finishes (:func:`train_segment`'s own tests). With no stop
    rule reading it now either, nothing reads the mainline's decision-split accuracy, and :func:`_decision_scored`
    need not score a merged average on that split.

    Why: a round after the next segment reads it (its movement, :mod:`evotrainer.agent.movement`; the check of a
    promotion that fell, :mod:`evotrainer.agent.revise`), as do ``stop.target_accuracy`` and, unless the round
    promoted (``reset``), ``stop.plateau_rounds``. Without those an evaluation of 500 greedy episodes (~3 s of
    agentic's 400-step campaign) is thrown away. The same test as :func:`train_segment`'s for its last segment.
    """
    stop, steps = ctx.spec.stop, ctx.spec.segment_steps
    if stop.target_accuracy is not None or (not reset and streak + 1 >= stop.plateau_rounds):
        return False
    rest = _remaining(ctx)
    return rest < steps or (rest > steps and _explore_spent(ctx, mainline, steps))
