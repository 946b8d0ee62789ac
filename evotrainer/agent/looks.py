"""Deciding at a look: the branches as they stood at the look, the backtest rule applied to them, and whether a
larger step of a promoted step-size knob should be tried.
"""

from __future__ import annotations

from evotrainer.agent.movement import (
    noninferiority,
    outcomes_at,
    round_stuck,
)
from evotrainer.agent.state import CampaignContext
from evotrainer.config.harness import (
    STEP_SIZE_KNOBS,
    enlarges_update,
)
from evotrainer.core.domain import BranchResult, Decision, PolicyVersion
from evotrainer.stats.backtest import decide, effect_interval


def _at_look(b: BranchResult, look: int) -> BranchResult:
    """A branch as it stood at one of its looks (1-based); a failed branch stays failed."""
    if look > len(b.looks):
        return b.model_copy(update={"status": "failed", "eval_accuracy": None,
                                    "error": b.error or f"stopped before look {look}"})
    entry = b.looks[look - 1]
    return b.model_copy(update={
        "status": entry["status"], "error": entry.get("error"), "eval_accuracy": entry["eval_accuracy"],
        "train_reward": entry["train_reward"], "gate_passed": entry.get("gate_passed"),
        "gate_reasons": list(entry.get("gate_reasons") or []), "step": entry["step"]})


def _decide_look(ctx: CampaignContext, pid: str, branches: list[BranchResult], look: int, parent: PolicyVersion,
                 undecided: str | None = None, last: bool = False) -> Decision | None:
    """The decision rule for ``pid`` at ``look`` (None: undecided there), pairing branches per problem; ``last``:
    the budget ended the backtest at this look (``decide``'s unplanned last look). ``parent``: the version the
    branches forked from; in a stuck round a change that enlarges the update may be promoted on non-inferiority
    when its branches moved away from the parent's answers and the control's did not
    (:func:`evotrainer.agent.movement.noninferiority`)."""
    b = ctx.spec.backtest
    control = [_at_look(x, look) for x in branches if x.role == "control"]
    treat = [_at_look(x, look) for x in branches if x.proposal_id == pid]
    outcomes: dict[tuple[str, int], list[int]] = {}
    for x in [*control, *treat]:
        if x.status == "finished":
            o = outcomes_at(ctx.home, x.run_name, x.step)
            if o is not None:
                outcomes[("control" if x.role == "control" else pid, x.seed)] = o
    step = next((x.step for x in treat if x.step is not None), None)
    rel = None if step is None else b.branch_steps * look // b.looks
    arms = {"control": [o for (arm, _), o in outcomes.items() if arm == "control"],
            "treatment": [o for (arm, _), o in outcomes.items() if arm == pid]}
    margin, moves = noninferiority(ctx, pid, parent, arms)
    return decide(pid, control, treat, b.min_effect, b.confidence, look=look, looks=b.looks, step=rel,
                  outcomes=outcomes or None, undecided=undecided, futility_effect=b.futility_effect,
                  project_futility=b.project_futility, last=last, noninferior=margin, moves=moves,
                  by_estimate=b.spent_estimate)


def _larger_step(ctx: CampaignContext, best: Decision, decisions: list[Decision],
                 branches: list[BranchResult]) -> tuple[Decision, str] | None:
    """A stuck round's larger raise to adopt in place of the promoted smaller one ``best`` (spec
    ``backtest.stuck_prefer_larger``), with why; None when there is none.

    The candidates are the round's other proposals on ``best``'s knob that raise the update further, left open (an
    ``inconclusive`` decision) at the look ``best`` was promoted at. One is adopted when the data do not show it
    worse: its effect over the control is positive, every branch finished with its gate passed, no seed sits more
    than ``backtest.stuck_margin`` below its control (a raise that diverged on one seed is a raise too far), and its
    per-problem paired interval against ``best``'s branches (:func:`evotrainer.stats.backtest.effect_interval`, at
    ``backtest.confidence``) reaches 0. Of several, the largest. Why: a look 10-30 steps in is biased toward the
    smaller step (short-horizon bias, Wu et al. 2018, "Understanding Short-Horizon Bias in Stochastic
    Meta-Optimization"): a larger step's gain compounds over the steps the mainline has left, and a smaller one that
    merely reads level after 10 steps can stall there (agentic seeds 0 and 3, bench/log/07-campaign-vs-static-baseline.md 2026-11-28). This
    proves no gain over the control (rule ``larger_step``); the selection-split rollback (:func:`_keep_best`) guards
    the mainline after it.
    """

    b = ctx.spec.backtest
    if not b.stuck_prefer_larger or b.stuck_margin is None or best.stats is None:
        return None
    p = ctx.store.get_proposal(best.proposal_id)
    if not enlarges_update(p.knob, p.old, p.new) or not round_stuck(ctx, p.round):
        return None
    look = best.stats.look

    def arm(pid: str | None) -> dict[int, BranchResult]:
        return {x.seed: _at_look(x, look) for x in branches
                if (x.role == "control" if pid is None else x.proposal_id == pid)}

    control, small = arm(None), arm(best.proposal_id)
    found: list[tuple[float, Decision, str]] = []
    for d in decisions:
        q = ctx.store.get_proposal(d.proposal_id)
        if (d.outcome != "inconclusive" or d.stats is None or d.stats.look != look or d.stats.effect <= 0
                or q.knob != p.knob or not enlarges_update(q.knob, p.new, q.new)):
            continue
        big = arm(q.id)
        if (len(big) < 2 or set(big) != set(small) or not set(big) <= set(control)
                or any(x.status != "finished" or x.gate_passed is not True for x in big.values())):
            continue
        seeds = sorted(big)
        worst = min(big[s].eval_accuracy - control[s].eval_accuracy for s in seeds)
        if worst < -b.stuck_margin:
            continue
        pairs = [(outcomes_at(ctx.home, big[s].run_name, big[s].step),
                  outcomes_at(ctx.home, small[s].run_name, small[s].step)) for s in seeds]
        if any(g is None or m is None or len(g) != len(m) for g, m in pairs) or len({len(g) for g, _ in pairs}) != 1:
            continue
        effect, _, _, half = effect_interval([[x - y for x, y in zip(g, m)] for g, m in pairs], b.confidence)
        if effect + half < 0:
            continue
        found.append((float(q.new), d, (
            f"{q.knob} → {q.new!r} adopted in place of {p.new!r} ({best.proposal_id}, promoted at look {look}): "
            f"a stuck round's larger raise the data do not show worse — against it {effect:+.3f} "
            f"({b.confidence:.0%} CI {effect - half:+.3f}..{effect + half:+.3f}), over the control "
            f"{d.stats.effect:+.3f}, no seed more than {b.stuck_margin:g} below its control (worst {worst:+.3f}); "
            "a short look favours the smaller step (backtest.stuck_prefer_larger)")))
    if not found:
        return None
    _, d, why = max(found, key=lambda f: f[0] * STEP_SIZE_KNOBS[p.knob])  # the furthest raise
    return d, why
