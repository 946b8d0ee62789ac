"""The mainline: which policy version the campaign continues from. Keeping the best version of a round (a rollback
when the newest is worse), the versions a last segment saved on its way, the base policy's version, a kept branch (and
the merged average of its seeds), and the start's recorded selection accuracy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evotrainer.agent.runs import _harness, _now, _score
from evotrainer.agent.state import CampaignContext
from evotrainer.config.harness import (
    HarnessSpec,
)
from evotrainer.core.domain import PolicyVersion
from evotrainer.core.runmeta import read_run_meta
from evotrainer.evidence.model import read_metrics
from evotrainer.jobs.lineage import complete_checkpoints
from evotrainer.jobs.scoring import MergeRequest
from evotrainer.stats.backtest import regression_margin


def _judged(pv: PolicyVersion) -> float | None:
    """The accuracy a version is chosen by: the selection split's, or the decision split's in older records."""
    return pv.selection_accuracy if pv.selection_accuracy is not None else pv.eval_accuracy


def _keep_best(ctx: CampaignContext, rnd: int, current: PolicyVersion) -> PolicyVersion:
    """The version the mainline goes on from: ``current``, or its best ancestor when ``current``'s held-out
    accuracy on the selection split fell below it by more than :func:`regression_margin` (spec ``rollback``).

    Choosing among versions is a selection, so it is judged on the selection split (not the decision split the
    backtests promote on, nor the confirmation split the final number is reported on). Only ancestors count (a
    version a person rolled back from is not one), and only those measured within the same completion budget
    as ``current``: each version's held-out accuracy is played within its own harness's budget, and a promoted
    shorter budget must not read as a regression. Only the checkpoint goes back: the harness stays the
    mainline's, since each of its changes won a backtest (``campaign rollback`` by hand restores both).
    ``current`` stays in the lineage, so the decline is on record, and the event is written once per declined
    version, so a re-run node after ``kill -9`` decides the same way without a second line.

    The campaign's base policy counts as the first ancestor (:func:`_base_version`): a recipe that wrecks the
    policy in its first segment is otherwise handed back wrecked, however far below its start it ends (agentic's
    lr 3e-4 took one warm start from 0.250 to 0.004, bench/log/07-campaign-vs-static-baseline.md 2026-11-27).
    """
    sp = ctx.spec
    if not sp.rollback.enabled or _judged(current) is None:
        return current
    by_id = {pv.id: pv for pv in ctx.store.policy_lineage(ctx.campaign_id)}
    budget = _harness(ctx, current.harness_version).grpo.max_completion_length
    earlier, parent, root = [], current.parent_id, current
    while parent is not None and parent in by_id:
        pv = by_id[parent]
        if _judged(pv) is not None and pv.checkpoint and \
                _harness(ctx, pv.harness_version).grpo.max_completion_length == budget:
            earlier.append(pv)
        parent, root = pv.parent_id, pv
    if (base := _base_version(ctx, root, budget)) is not None:
        earlier.append(base)
    if not earlier:
        return current
    best = max(earlier, key=_judged)
    margin = regression_margin(_judged(best), _judged(current), sp.eval.n, sp.rollback.confidence,
                               sp.backtest.min_effect)
    if _judged(best) - _judged(current) <= margin:
        return current
    if best is base:  # stored only when the mainline goes back to it, once (by id): a re-run after kill -9 finds it
        best = ctx.store.add_policy_version(base)
    if not any(e.message.get("from") == current.id for e in ctx.store.events(ctx.campaign_id, kind="regression_rollback")):
        ctx.store.log_event(ctx.campaign_id, "regression_rollback", {
            "round": rnd, "from": current.id, "to": best.id, "from_accuracy": _judged(current),
            "to_accuracy": _judged(best), "margin": round(margin, 6),
            "split": "selection" if current.selection_accuracy is not None else "decision"})
    ctx.log(f"round {rnd}: selection-split accuracy {_judged(current):.3f} is below the best version {best.id} "
            f"({_judged(best):.3f}) by more than {margin:.3f}; the mainline goes back to it")
    return best


def _on_the_way(ctx: CampaignContext, end: PolicyVersion, run_dir: Path) -> list[PolicyVersion]:
    """The versions segment ``end`` saved before its end (``budget.final_checks``), stored in order, each the parent
    of the next, the first a child of ``end``'s parent; [] for a segment that saved only its end (every segment but
    the last). ``end`` is then stored as the child of the last of them, so :func:`_keep_best` may go back to any:
    without them a last segment that overfit or collapsed could go back only to where it started. Idempotent by id,
    so a re-run after ``kill -9`` stores nothing twice."""
    meta = read_run_meta(run_dir)
    lo = meta.start_step if meta is not None else end.step
    ckpts = {s: c for s, c in complete_checkpoints(run_dir).items() if lo < s < end.step}
    if not ckpts:
        return []
    m = read_metrics(run_dir)
    acc = m.set_index("step")["eval/greedy_accuracy"].dropna() if "eval/greedy_accuracy" in m else {}
    out, parent = [], end.parent_id
    for step in sorted(ckpts):
        pv = PolicyVersion(id=f"{end.id}@{step}", campaign_id=end.campaign_id, parent_id=parent,
                           harness_version=end.harness_version, checkpoint=str(ckpts[step]), run_name=end.run_name,
                           mlflow_run_id=end.mlflow_run_id, step=step, created=_now(),
                           eval_accuracy=float(acc[step]) if step in acc else None)
        out.append(ctx.store.add_policy_version(pv))
        parent = pv.id
    return out


BASE = "base"  # id suffix of the version that stands for the campaign's base policy


def _base_version(ctx: CampaignContext, root: PolicyVersion, budget: int) -> PolicyVersion | None:
    """The campaign's base policy as a version the mainline may go back to (not yet stored), or None.

    ``root`` is the earliest version of the mainline's line; only when it is the campaign's first segment (not the
    base itself) does the base stand before it. The base is judged by its selection-split accuracy, scored once
    within the start harness's budget (an ``explore_start`` event), so it counts only where the mainline plays
    within that budget too. Its checkpoint is the base policy's directory and it belongs to no run: a segment or
    backtest from it starts a new job from the base, as the first segment did.
    """
    base_id = f"{ctx.campaign_id}:{BASE}"
    start = ctx.store.get_campaign(ctx.campaign_id).spec.get("initial_harness_version")
    if root.id == base_id or root.parent_id is not None or not root.run_name or start is None:
        return None
    harness = _harness(ctx, start)
    if harness.grpo.max_completion_length != budget:
        return None
    acc = _start_selection(ctx, root, harness)
    policy = next((e.message.get("policy") for e in ctx.store.events(ctx.campaign_id, kind="explore_start")), None)
    if acc is None or not policy:
        return None
    return PolicyVersion(id=base_id, campaign_id=ctx.campaign_id, parent_id=None, harness_version=start,
                         checkpoint=str(policy), run_name=None, mlflow_run_id=None, eval_accuracy=None, step=0,
                         created=_now(), selection_accuracy=acc)


def _decision_scored(ctx: CampaignContext, pv: PolicyVersion) -> PolicyVersion:
    """``pv`` with its decision-split accuracy and per-problem outcomes, scored now (and recorded as its run's
    evaluation at its step) when no job evaluated it: a merged average of seeds (:func:`_keep_branch`)."""
    if pv.eval_accuracy is not None or not pv.run_name or not pv.checkpoint:
        return pv
    run_dir = ctx.home / "jobs" / pv.run_name
    dec = _score(ctx, [(pv.checkpoint, _harness(ctx, pv.harness_version).grpo.max_completion_length)],
                 split="decision", record=[(run_dir, pv.step)])
    return ctx.store.set_version_accuracy(pv.id, dec[0], split="decision") if dec else pv


def _fork_of(pv: PolicyVersion | None) -> str | None:
    """The ``fork`` a job continuing from ``pv`` names: its run at its step; None (a new job from the base policy)
    for no version or the base's."""
    return f"{pv.run_name}@{pv.step}" if pv is not None and pv.run_name else None


def _start_selection(ctx: CampaignContext, pv: PolicyVersion, harness: HarnessSpec) -> float | None:
    """The base policy's selection-split accuracy (round 0's parent), scored once and kept as an event."""
    for e in ctx.store.events(ctx.campaign_id, kind="explore_start"):
        return e.message.get("accuracy")
    meta = read_run_meta(ctx.home / "jobs" / pv.run_name) if pv.run_name else None
    if meta is None or not meta.base_policy:
        return None
    acc = _score(ctx, [(meta.base_policy, harness.grpo.max_completion_length)])
    return _record_start(ctx, meta.base_policy, acc[0]) if acc else None


def _record_start(ctx: CampaignContext, policy: str, accuracy: float) -> float:
    ctx.store.log_event(ctx.campaign_id, "explore_start", {"policy": policy, "accuracy": accuracy})
    return accuracy


def _unscored_start(ctx: CampaignContext, first: PolicyVersion) -> tuple[str, int] | None:
    """(base policy, the start harness's budget) when ``first`` is the campaign's first segment and the base has no
    selection-split score yet, but a rollback or ``budget.healthy_explore_share`` will read one
    (:func:`_start_selection`); else None."""
    sp = ctx.spec
    if first.parent_id is not None or not first.run_name or not (
            sp.rollback.enabled or sp.budget.healthy_explore_share is not None) \
            or ctx.store.events(ctx.campaign_id, kind="explore_start"):
        return None
    meta = read_run_meta(ctx.home / "jobs" / first.run_name)
    start = ctx.store.get_campaign(ctx.campaign_id).spec.get("initial_harness_version")
    if meta is None or not meta.base_policy or start is None:
        return None
    return meta.base_policy, _harness(ctx, start).grpo.max_completion_length


def _keep_branch(ctx: CampaignContext, rnd: int, bt_id: str, best: str | None, version: str,
                 mainline: str) -> PolicyVersion | None:
    """Population-based training's "exploit": the mainline continues from what the branches trained under the
    harness the round adopts — every seed of the promoted arm, or every control seed when nothing was promoted —
    learned. Each of them already trained its steps under that harness from the mainline's checkpoint, so those
    steps are not lost to the backtest.

    With ``backtest.merge_seeds`` the seeds are also averaged into one checkpoint (a model soup,
    :mod:`evotrainer.jobs.merge`), and the mainline continues from the average unless it scores below every
    seed; otherwise from the best seed. Scores are the selection split's greedy accuracy (disjoint from the
    decision split the backtest decided on and from the confirmation split the campaign reports, so choosing
    does not bias either). The choice and every candidate's numbers are recorded once as a ``kept_branch``
    event (a re-run after ``kill -9`` finds it and makes the same version; the merged job, once published, is
    reused).
    """
    branches = ctx.store.list_branches(bt_id)
    arm = [x for x in branches if (x.proposal_id == best if best else x.role == "control") and x.status == "finished"
           and x.step is not None]
    if not arm:
        return None
    role = "promoted" if best else "control"
    done = [e for e in ctx.store.events(ctx.campaign_id, kind="kept_branch") if e.message.get("round") == rnd]
    merged = None
    if done:
        merged = done[0].message.get("merged")
        if not (merged and done[0].message["chosen"] == merged["run"]):
            chosen = next(x for x in arm if x.run_name == done[0].message["chosen"])
            merged = None
    else:
        got = _choose_kept(ctx, rnd, bt_id, best, version, arm, role)
        if got is None:
            return None
        chosen, merged = got
    if merged is not None:
        run_dir = ctx.home / "jobs" / merged["run"]
        meta = read_run_meta(run_dir)
        return ctx.store.add_policy_version(PolicyVersion(
            id=f"{ctx.campaign_id}:r{rnd:02d}:{role}", campaign_id=ctx.campaign_id, parent_id=mainline,
            harness_version=version, checkpoint=str(complete_checkpoints(run_dir)[merged["step"]]),
            run_name=merged["run"], mlflow_run_id=meta.run_id if meta else None,
            eval_accuracy=merged.get("decision_accuracy"), step=merged["step"], created=_now(),
            selection_accuracy=merged["selection_accuracy"]))
    meta = read_run_meta(ctx.home / "jobs" / chosen.run_name)
    step = chosen.step
    ck = complete_checkpoints(ctx.home / "jobs" / chosen.run_name)
    return ctx.store.add_policy_version(PolicyVersion(
        id=f"{ctx.campaign_id}:r{rnd:02d}:{role}", campaign_id=ctx.campaign_id,
        parent_id=mainline, harness_version=version, checkpoint=str(ck[step]), run_name=chosen.run_name,
        mlflow_run_id=meta.run_id if meta else None, eval_accuracy=chosen.eval_accuracy, step=step, created=_now(),
        selection_accuracy=chosen.selection_accuracy))


def _choose_kept(ctx: CampaignContext, rnd: int, bt_id: str, best: str | None, version: str, arm: list,
                 role: str) -> tuple[Any, dict[str, Any] | None] | None:
    """Score the arm's seeds (and their average, with ``backtest.merge_seeds``) on the selection split, record the
    choice once (``kept_branch``), and return (the chosen seed's branch, the merge when it is kept, else None)."""
    merged: dict[str, Any] | None = None
    budget = _harness(ctx, version).grpo.max_completion_length
    cands = []
    for x in arm:
        ck = complete_checkpoints(ctx.home / "jobs" / x.run_name)
        if x.step in ck:
            cands.append((x, str(ck[x.step])))
    if not cands:
        return None
    singles = [(path, budget) for _, path in cands]
    merge = None
    if ctx.spec.backtest.merge_seeds and len(cands) >= 2 and len({x.step for x, _ in cands}) == 1:
        merge = MergeRequest(home=str(ctx.home), name=f"{ctx.campaign_id}__r{rnd:02d}__merged", max_new_tokens=budget,
                             sources=[(str(x.run_name), x.step) for x, _ in cands],
                             tags={"evotrainer.campaign": ctx.campaign_id, "evotrainer.round": str(rnd)})
    sel = _score(ctx, singles, merge=merge)
    if sel is None and merge is not None:  # the merge failed (recorded): choose among the seeds alone
        merge, sel = None, _score(ctx, singles)
    scored = []
    for n, (x, path) in enumerate(cands):
        acc = sel[n] if sel is not None else None
        if acc is not None:
            x = ctx.store.set_branch_selection(bt_id, x.proposal_id, x.role, x.seed, acc)
        scored.append((x, path))
    # best on the selection split; ties (or no scores) by the decision split, then the lowest seed
    chosen = max(scored, key=lambda t: (t[0].selection_accuracy if t[0].selection_accuracy is not None else -1,
                                        t[0].eval_accuracy or 0.0, -t[0].seed))[0]
    if merge is not None:
        merged = {"run": merge.name, "step": cands[0][0].step, "selection_accuracy": sel[len(cands)],
                  "from": [x.run_name for x, _ in cands]}
        # a merge that broke something scores below every seed it came from
        # (its decision split is scored when a round follows, which reads it: _decision_scored)
        merged["kept"] = merged["selection_accuracy"] >= min(sel[: len(cands)])
    ctx.store.log_event(ctx.campaign_id, "kept_branch", {
        "round": rnd, "arm": best or "control", "chosen": merged["run"] if merged and merged["kept"]
        else chosen.run_name, "split": "selection", "n": ctx.spec.eval.n, "merged": merged, "candidates": [
            {"run": x.run_name, "seed": x.seed, "step": x.step, "selection_accuracy": x.selection_accuracy,
             "decision_accuracy": x.eval_accuracy} for x, _ in scored]})
    if merged and merged["kept"]:
        ctx.log(f"round {rnd}: the mainline continues from {merged['run']}, the average of the {len(cands)} "
                f"{role} seeds (selection split {merged['selection_accuracy']}; the seeds "
                f"{', '.join(str(x.selection_accuracy) for x, _ in scored)})")
    else:
        ctx.log(f"round {rnd}: the mainline continues from {chosen.run_name} (selection split "
                f"{chosen.selection_accuracy}, best of {len(scored)} {role} branches"
                + (f"; their average scored {merged['selection_accuracy']}, below every seed)" if merged else ")"))
        merged = None
    return chosen, merged
