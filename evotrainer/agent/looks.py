"""Deciding at a look: the branches as they stood at the look, and the backtest rule applied to them, paired per
problem.
"""

from __future__ import annotations

from evotrainer.agent.movement import outcomes_at
from evotrainer.agent.state import CampaignContext
from evotrainer.core.domain import BranchResult, Decision
from evotrainer.stats.backtest import decide


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


def _decide_look(ctx: CampaignContext, pid: str, branches: list[BranchResult], look: int,
                 undecided: str | None = None, last: bool = False) -> Decision | None:
    """The decision rule for ``pid`` at ``look`` (None: undecided there), pairing branches per problem; ``last``:
    the budget ended the backtest at this look (``decide``'s unplanned last look)."""
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
    return decide(pid, control, treat, b.min_effect, b.confidence, look=look, looks=b.looks, step=rel,
                  outcomes=outcomes or None, undecided=undecided, futility_effect=b.futility_effect,
                  project_futility=b.project_futility, last=last, by_estimate=b.spent_estimate)

