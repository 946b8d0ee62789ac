"""A backtest's branches: which approved proposals the budget lets it test, and one look of every open arm × seed
trained, gated and recorded.

Why apart from the backtest node: the node is the loop over looks and the decision after each; what a look does to
the branches (which legs still train, their jobs side by side, the mainline's gate on each treatment, the look's
entry in each branch's record) is the part a reader looks for when a branch's numbers look wrong.
"""

from __future__ import annotations

from typing import Any

from evotrainer.agent.arms import _branch_name
from evotrainer.agent.budget import _look_budget
from evotrainer.agent.runs import JobAsk, _run_many
from evotrainer.agent.state import CampaignContext, CampaignState
from evotrainer.core.domain import BranchResult, PolicyVersion
from evotrainer.diagnostics.gates import check_gate
from evotrainer.evidence.model import evidence_upto
from evotrainer.evidence.readers import read_job_dir
from evotrainer.store import NotFound


def _planned(ctx: CampaignContext, state: CampaignState, rnd: int, bt_id: str, seeds: list[int],
             parent: PolicyVersion) -> Any:
    """The round's backtest as recorded; made now, with as many approved proposals as the budget's next look has
    room for (the rest ``skipped_budget``), when there is none yet. None when not even one fits."""
    try:
        return ctx.store.get_backtest(bt_id)
    except NotFound:
        pass
    approved = list(state["approved_ids"])
    k, why = len(approved), None
    while k and (why := _look_budget(ctx, rnd, parent, 1 + k, [])) is not None:
        k -= 1
    for pid in approved[k:]:
        ctx.store.set_proposal_status(pid, "skipped_budget")
    if k < len(approved):
        ctx.store.log_event(ctx.campaign_id, "backtest_trimmed", {
            "round": rnd, "skipped": approved[k:], "reason": why or _look_budget(ctx, rnd, parent, 1 + len(approved), [])})
    if k == 0:
        ctx.log(f"backtest skipped: {why}")
        return None
    ctx.store.add_backtest(bt_id, ctx.campaign_id, rnd, approved[:k], seeds, ctx.spec.backtest.branch_steps)
    return ctx.store.get_backtest(bt_id)


def _train_look(ctx: CampaignContext, rnd: int, bt_id: str, look: int, upto: int, every: int, arms: list[tuple],
                seeds: list[int], fork: str | None, open_: list[str], branches: dict[tuple[str | None, int], BranchResult],
                registry: Any) -> None:
    """Train every open arm × seed to global step ``upto`` (look ``look``) side by side, gate each treatment on what
    it has done so far (the mainline's gate: ``registry``), and add the look to each branch's record in
    ``branches``. A failed branch is not trained again, nor is a decided proposal's."""
    b = ctx.spec.backtest
    legs = [(pid, role, index, h, seed) for seed in seeds for pid, role, index, h in arms
            if not ((pid is not None and pid not in open_) or (pid, seed) in branches
                    and branches[(pid, seed)].status == "failed")]
    # every arm × seed of this look at once: the launcher runs as many side by side as it has workers
    results = _run_many(ctx, [JobAsk(_branch_name(ctx, rnd, role, index, seed), h, b.branch_steps, seed, fork,
                                     every, {"evotrainer.role": role, "evotrainer.proposal": pid or "",
                                             "evotrainer.round": str(rnd), "evotrainer.seed": str(seed)}, upto)
                              for pid, role, index, h, seed in legs])
    for (pid, role, _index, _h, seed), res in zip(legs, results):
        gate = None
        if role == "treatment" and res.status == "finished":
            gate = check_gate(evidence_upto(read_job_dir(res.run_dir), upto), registry, final=look == b.looks)
        entry = {"look": look, "step": upto, "trained": every * look, "status": res.status, "error": res.error,
                 "eval_accuracy": res.eval_accuracy, "train_reward": res.train_reward,
                 # None for a control, and for a gate that had too little evidence yet at an interim look
                 "gate_passed": None if gate is None else (False if gate.reasons else
                                                           (None if gate.undecided else True)),
                 "gate_reasons": [] if gate is None else gate.reasons}
        prev = branches.get((pid, seed))
        branches[(pid, seed)] = BranchResult(
            backtest_id=bt_id, proposal_id=pid, role=role, seed=seed, run_name=res.name, status=res.status,
            error=res.error, eval_accuracy=res.eval_accuracy, train_reward=res.train_reward,
            gate_passed=entry["gate_passed"], gate_reasons=entry["gate_reasons"], steps=res.steps,
            step=res.step, looks=[*(prev.looks if prev else []), entry])
