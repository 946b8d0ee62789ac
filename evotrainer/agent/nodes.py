"""The campaign's nodes: train segment → diagnose → propose → review → backtest → decide → distill.

Every node is safe to re-run after ``kill -9``: runs have deterministic names (a finished run is read
back, an interrupted one is resumed), and every record is written with an idempotent key (proposal ids,
one review and one decision per proposal, ledger entries keyed by run name). Routes are in each node's
``Command[Literal[...]]`` signature. The review node writes nothing before its ``interrupt()`` is
answered: LangGraph re-runs a node from its start on resume, so code before an interrupt runs twice.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from evotrainer.agent.arms import (
    _knob_history,
    _seeds,
)
from evotrainer.agent.branches import _planned, _train_look
from evotrainer.agent.budget import _explore_spent, _last_round, _look_budget
from evotrainer.agent.confirm import confirm
from evotrainer.agent.lessons import curate_round
from evotrainer.agent.looks import _decide_look
from evotrainer.agent.mainline import (
    _decision_scored,
    _fork_of,
    _keep_best,
    _keep_branch,
    _on_the_way,
    _record_start,
    _unscored_start,
)
from evotrainer.agent.proposing import draft_round
from evotrainer.agent.regression import regression_finding
from evotrainer.agent.revise import campaign_revisions, refuted_blocks
from evotrainer.agent.runs import (
    JobAsk,
    _harness,
    _now,
    _out_of_time,
    _remaining,
    _run,
    _score,
    _timed_score,
    _waiting,
)
from evotrainer.agent.state import CampaignContext, CampaignState, segment_id
from evotrainer.agent.values import ValueOptimizer
from evotrainer.config.harness import (
    HarnessSpec,
    diff,
)
from evotrainer.core.domain import BranchResult, PolicyVersion, Review
from evotrainer.core.runmeta import read_run_meta
from evotrainer.diagnostics.registry import Registry
from evotrainer.evidence.readers import read_job_dir

STATUS_OF = {"promote": "promoted", "reject": "refuted", "inconclusive": "inconclusive", "blocked": "blocked",
             "failed": "failed"}


def _finish(reason: str) -> Command:
    return Command(goto="finish", update={"stop_reason": reason})


def train_segment(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["diagnose", "finish"]]:
    ctx, rnd = runtime.context, state["round"]
    name = f"{ctx.campaign_id}__r{rnd:02d}__segment"
    meta = read_run_meta(ctx.home / "jobs" / name)
    # once the exploration share cannot pay for one more look, or a look would eat into budget.final_share, nothing
    # is left to backtest: the mainline trains the rest. Steps a backtest did not spend (it stopped early) stay in the
    # budget for later rounds: given to the next segment they made it so long (~180 of a 400-step flaw-suite budget)
    # that no look fit after it, and 33 of round third's 38 campaigns decided only in round 0
    # (bench/log/19-flaw-suite.md).
    parent = ctx.store.get_policy_version(state["mainline"]) if state.get("mainline") else None
    steps = min(ctx.spec.segment_steps, max(_remaining(ctx), 0))
    last = _explore_spent(ctx, parent, steps) and _remaining(ctx) >= ctx.spec.segment_steps
    if last:
        steps = _remaining(ctx)
    # the last segment (the rest of the budget) saves and evaluates budget.final_checks evenly spaced versions
    # (mainline._on_the_way)
    every = -(-steps // ctx.spec.budget.final_checks) if last or steps >= _remaining(ctx) else steps
    if meta is not None:
        steps, every = int(meta.spec["steps"]), int(meta.spec["eval"]["every"])
    elif _remaining(ctx) < ctx.spec.segment_steps:
        return _finish(f"budget: {_remaining(ctx)} steps left, a segment needs {ctx.spec.segment_steps}")
    elif _out_of_time(ctx):
        return _finish("wall-clock cap reached")
    fork = _fork_of(parent)
    harness = _harness(ctx, state["harness_version"])
    res = _run(ctx, JobAsk(name, harness, steps, ctx.spec.seed, fork, every,
                           {"evotrainer.role": "segment", "evotrainer.round": str(rnd)}))
    if res.status != "finished":
        # with no mainline yet nothing was trained (a refused warm start, a bad dataset): the campaign failed
        return Command(goto="finish", update={"stop_reason": f"segment {name} failed: {res.error}",
                                              "failed": parent is None})
    pv = PolicyVersion(id=segment_id(ctx.campaign_id, rnd), campaign_id=ctx.campaign_id,
                       parent_id=state.get("mainline"), harness_version=harness.version, checkpoint=res.checkpoint,
                       run_name=name, mlflow_run_id=res.run_id, eval_accuracy=res.eval_accuracy, step=res.step,
                       created=_now())
    way = _on_the_way(ctx, pv, res.run_dir)
    pv = ctx.store.add_policy_version(pv.model_copy(update={"parent_id": way[-1].id}) if way else pv)
    todo = [v for v in [*way, pv] if v.selection_accuracy is None]
    if todo:  # what a rollback compares: the selection split (see _keep_best)
        # the first segment's start (the base policy) is judged on the same split: scored in the same call, beside it
        base = _unscored_start(ctx, [*way, pv][0])
        sel = _score(ctx, [(v.checkpoint, harness.grpo.max_completion_length) for v in todo] + ([base] if base else []))
        if sel:
            for v, acc in zip(todo, sel):
                stored = ctx.store.set_version_accuracy(v.id, acc)
                pv = stored if v.id == pv.id else pv
            if base:
                _record_start(ctx, base[0], sel[len(todo)])
    ctx.log(f"round {rnd}: segment of {steps} steps done, held-out accuracy {res.eval_accuracy} "
            f"(selection split {pv.selection_accuracy})")
    keep = _keep_best(ctx, rnd, pv)  # the backtest forks from here; the segment's evidence is still diagnosed
    ctx.store.set_campaign(ctx.campaign_id, mainline_version=keep.id)
    update = {"mainline": keep.id, "segment_run": name}
    if _remaining(ctx) <= 0 and steps > ctx.spec.segment_steps:
        # this segment trained the rest of the budget (nothing was left to backtest): done
        return Command(goto="finish", update={**update, "stop_reason": f"budget spent: the last segment trained the "
                                                                       f"remaining {steps} steps on the mainline"})
    return Command(goto="diagnose", update=update)


def diagnose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["propose"]]:

    ctx = runtime.context
    name = state["segment_run"]
    findings = Registry(_harness(ctx, state["harness_version"])).run(read_job_dir(ctx.home / "jobs" / name))
    if (fell := regression_finding(ctx, state["round"])) is not None:  # the segment was rolled back (agent/regression.py)
        findings = [fell, *findings]
    ctx.store.add_findings(ctx.campaign_id, state["round"], name, findings)
    ctx.log("findings: " + (", ".join(f"{f.severity} {f.symptom}" for f in findings if f.severity != "info") or "none"))
    return Command(goto="propose")


def propose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["review", "distill"]]:
    """Ask the brain which knobs to change; ask Optuna how far (numeric knobs); screen what rollouts can predict.

    The brain is asked for a few drafts more than a round backtests, so that screened-out ones leave room for
    the next. A draft that screens as nil is recorded as a proposal with status and decision ``screened``
    (its numbers in the reasons) and is neither reviewed nor backtested.
    """
    ctx, rnd = runtime.context, state["round"]
    existing = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    if not existing:
        draft_round(ctx, state, rnd)
        existing = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    for p in existing:
        ctx.log(f"proposal {p.id}: {p.knob} {p.old!r} → {p.new!r} ({p.hypothesis.symptom})"
                + (" — screened out, predicted no effect on the training signal" if p.status == "screened" else ""))
    live = [p for p in existing if p.status != "screened"]
    if not live:
        # said, not silent: a troubled round that backtests nothing trains its next segment on the same recipe
        notes = [n for e in ctx.store.events(ctx.campaign_id, kind="brain") if e.message.get("round") == rnd
                 for n in e.message.get("notes") or []]
        notes += [e.message["error"] for e in ctx.store.events(ctx.campaign_id, kind="invalid_draft")
                  if e.message.get("round") == rnd]
        ctx.log(f"round {rnd}: nothing to backtest"
                + (f" ({'; '.join(notes)})" if notes else
                   " (no candidate change passed the brain, its mistake notes and the round's rules)" if not existing
                   else " (every proposal was screened out)"))
        return Command(goto="distill", update={"proposal_ids": [], "approved_ids": []})
    return Command(goto="review", update={"proposal_ids": [p.id for p in live]})


def review(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["backtest", "distill"]]:
    ctx = runtime.context
    ids = state["proposal_ids"]
    if ctx.spec.autonomy == "review":
        pending = [pid for pid in ids if ctx.store.get_review(pid) is None]
        while pending:
            interrupt({"campaign": ctx.campaign_id, "waiting_for_review": pending})
            pending = [pid for pid in ids if ctx.store.get_review(pid) is None]
    else:
        for pid in ids:
            ctx.store.add_review(Review(proposal_id=pid, verdict="approve", reviewer="auto",
                                        comment="autonomy: auto", at=_now()))
    approved = [pid for pid in ids if ctx.store.get_review(pid).verdict == "approve"]
    if not approved:
        return Command(goto="distill", update={"approved_ids": []})
    return Command(goto="backtest", update={"approved_ids": approved})


def backtest(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["decide", "distill"]]:
    """Control and treatments × paired seeds from the mainline's checkpoint, one look at a time.

    At each look every open arm's branches train to the look's step (paused jobs resume) and are evaluated on
    the decision split; each open proposal then gets the sequential rule (``evotrainer.stats.backtest``). A decided
    proposal's branches stop there; the control goes on while any proposal is open; a promotion ends the
    backtest (only one change is adopted a round, so the others would be re-tested on the new mainline
    anyway). Everything is re-derived from the job directories, so a re-run after ``kill -9`` retrains nothing
    and decides the same.
    """

    ctx, rnd = runtime.context, state["round"]
    bt_id = f"{ctx.campaign_id}:r{rnd:02d}:backtest"
    b = ctx.spec.backtest
    seeds = _seeds(ctx, rnd)
    parent = ctx.store.get_policy_version(state["mainline"])
    planned = _planned(ctx, state, rnd, bt_id, seeds, parent)
    if planned is None:
        return Command(goto="distill", update={"backtest_id": None})
    harness = _harness(ctx, state["harness_version"])
    registry = Registry(harness)  # treatments are judged by the mainline's gate, not their own
    fork = _fork_of(parent)
    arms = [(None, "control", None, harness)] + [
        (pid, "treatment", i, harness.with_knob((p := ctx.store.get_proposal(pid)).knob, p.new))
        for i, pid in enumerate(planned.proposal_ids, start=1)]
    for pid in planned.proposal_ids:
        if ctx.store.get_proposal(pid).status == "pending_review" or ctx.store.get_proposal(pid).status == "approved":
            ctx.store.set_proposal_status(pid, "backtesting")
    every = b.branch_steps // b.looks
    branches: dict[tuple[str | None, int], BranchResult] = {}
    open_ = list(planned.proposal_ids)
    arms_at: list[int] = []
    for look in range(1, b.looks + 1):
        if look > 1 and (why := _look_budget(ctx, rnd, parent, 1 + len(open_), arms_at)) is not None:
            if not any(e.message.get("round") == rnd for e in ctx.store.events(ctx.campaign_id, kind="backtest_stopped")):
                ctx.store.log_event(ctx.campaign_id, "backtest_stopped", {"round": rnd, "look": look - 1, "reason": why,
                                                                          "open": open_})
            ctx.log(f"backtest stopped after look {look - 1}: {why}")
            break
        arms_at.append(1 + len(open_))
        upto = parent.step + every * look
        _train_look(ctx, rnd, bt_id, look, upto, every, arms, seeds, fork, open_, branches, registry)
        listed = list(branches.values())
        decided = {pid: d for pid in open_ if (d := _decide_look(ctx, pid, listed, look)) is not None}
        open_ = [pid for pid in open_ if pid not in decided]
        if decided:
            ctx.log(f"look {look}/{b.looks} (step {every * look}): "
                    + ", ".join(f"{pid} {d.outcome}" for pid, d in decided.items()) + (f"; open: {', '.join(open_)}" if open_ else ""))
        if any(d.outcome == "promote" for d in decided.values()):
            open_ = []  # one change is adopted a round: the others are re-tested on the new mainline
        if not open_:
            break
    # the branches are done with: the decision forks from their checkpoints, it never resumes them
    with _waiting(ctx, "jobs"):
        ctx.pool.release()
    for br in branches.values():
        ctx.store.add_branch(br)
    return Command(goto="decide", update={"backtest_id": bt_id})


def decide_node(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["distill"]]:
    """Each proposal's decision at the look its branches stopped at (the rule the backtest stopped them by)."""
    ctx = runtime.context
    bt_id = state["backtest_id"]
    planned = ctx.store.get_backtest(bt_id)
    branches = ctx.store.list_branches(bt_id)
    decisions = []
    stopped = [e.message for e in ctx.store.events(ctx.campaign_id, kind="backtest_stopped")
               if e.message.get("round") == planned.round]
    for pid in planned.proposal_ids:
        existing = ctx.store.get_decision(pid)
        if existing is not None:
            decisions.append(existing)
            continue
        last = max([len(x.looks) for x in branches if x.proposal_id == pid] or [1])
        # open when the budget ended the backtest: this look is its final analysis
        budget_last = bool(stopped) and pid in (stopped[0].get("open") or []) and last < ctx.spec.backtest.looks
        d = _decide_look(ctx, pid, branches, last, undecided="inconclusive", last=budget_last)
        if d.outcome == "inconclusive" and last < ctx.spec.backtest.looks:
            why = (f"the backtest stopped here: {stopped[0]['reason']}" if stopped else
                   "the backtest stopped here because another proposal was promoted; re-test it on the new mainline")
            d = d.model_copy(update={"reasons": [*d.reasons, why]})
        decisions.append(d)
    promoted = [d for d in decisions if d.outcome == "promote"]
    # a change shown better outranks one adopted on the estimate, then the effect (a larger step stays adopted: only
    # a decision stored before that rule was removed, by a campaign killed here, still says so)
    top = max(promoted, key=lambda d: (d.stats.rule == "larger_step", d.stats.rule == "superiority", d.stats.effect),
              default=None)
    best = top.proposal_id if top is not None else None
    displaced = f"{best} had a larger effect and was promoted this round; re-test on the new mainline"
    # the adopted one is stored first, so a resume after a kill here reads it back and adopts it again
    for d in sorted(decisions, key=lambda d: d.proposal_id != best):
        if d.outcome == "promote" and d.proposal_id != best:
            d = d.model_copy(update={"outcome": "inconclusive", "reasons": [*d.reasons, displaced]})
        ctx.store.add_decision(d)
        ctx.store.set_proposal_status(d.proposal_id, STATUS_OF[d.outcome])
        # a promotion whose interval straddles 0 says by which rule it was adopted
        rule = f"; {d.reasons[-1]}" if d.outcome == "promote" and d.stats and d.stats.rule != "superiority" else ""
        ctx.log(f"decision {d.proposal_id}: {d.outcome} — {d.reasons[0]}{rule}")
    return Command(goto="distill", update={"promoted": best})


def _guarded(ctx: CampaignContext, what: str, rnd: int, fn, default):
    """Learning steps must not stall a campaign: an error is an event (and a log line), and the round goes on."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - recorded with its type; the decision itself is already stored
        ctx.store.log_event(ctx.campaign_id, f"{what}_error", {"round": rnd, "error": f"{type(err).__name__}: {err}"})
        ctx.log(f"{what} skipped this round: {type(err).__name__}: {err}")
        return default


def distill(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["train_segment", "finish"]]:
    ctx, rnd = runtime.context, state["round"]
    harness = _harness(ctx, state["harness_version"])
    mainline = state["mainline"]
    best = state.get("promoted")
    bt_id = state.get("backtest_id")
    if best:
        p = ctx.store.get_proposal(best)
        new = harness.with_knob(p.knob, p.new)
        ctx.store.add_harness_version(new.version, harness.version, new.model_dump(mode="json"),
                                      [c.model_dump(mode="json") for c in diff(harness, new)])
        harness = new
    # label this round's branches, catch gate misfires and revise the diagnostic (may add a harness version);
    # then what the round taught goes into the skill library (a block refuted by its own evidence is no mistake)

    harness = _guarded(ctx, "revision", rnd, lambda: campaign_revisions(ctx, rnd, bt_id, harness), harness)
    ops = _guarded(ctx, "curation", rnd, lambda: curate_round(ctx, rnd, refuted_blocks(ctx.store, ctx.campaign_id)), [])
    if ops:
        ctx.store.log_event(ctx.campaign_id, "curation", {"round": rnd, "ops": ops})
        ctx.log("library: " + ", ".join(f"{o['op']} {o['slug']}" for o in ops))
    if ctx.spec.values == "optuna":
        _guarded(ctx, "optimizer", rnd, lambda: _tell_optimizer(ctx, rnd, harness), None)
    version = harness.version
    if bt_id:
        pv = _keep_branch(ctx, rnd, bt_id, best, version, mainline)
        if pv is not None:
            mainline = _keep_best(ctx, rnd, pv).id
            ctx.store.set_campaign(ctx.campaign_id, mainline_version=mainline)
    pv = ctx.store.get_policy_version(mainline)
    if not _last_round(ctx, pv, bool(best), state.get("rounds_without_promotion", 0)):
        pv = _decision_scored(ctx, pv)
    acc = pv.eval_accuracy
    prev_best = state.get("best_accuracy")
    improved = acc is not None and (prev_best is None or acc > prev_best + ctx.spec.backtest.min_effect)
    streak = 0 if best or improved else state.get("rounds_without_promotion", 0) + 1
    seen = [a for a in (acc, prev_best) if a is not None]
    update = {"round": rnd + 1, "mainline": mainline, "harness_version": version, "rounds_without_promotion": streak,
              "best_accuracy": max(seen) if seen else None,
              "proposal_ids": [], "approved_ids": [], "backtest_id": None, "promoted": None, "segment_run": None}
    if ctx.mlflow_run_id:  # a kept average not scored on the decision split (a last round) has no point to plot
        ctx.tracker.log_metrics(ctx.mlflow_run_id, rnd, {**({} if acc is None else {"campaign/mainline_accuracy": acc}),
                                                         "campaign/budget_spent": ctx.store.ledger_total(ctx.campaign_id),
                                                         "campaign/promoted": 1.0 if best else 0.0})
    target = ctx.spec.stop.target_accuracy
    if target is not None and acc is not None and acc >= target:
        return Command(goto="finish", update={**update, "stop_reason": f"target accuracy {target} reached ({acc:.3f})"})
    if streak >= ctx.spec.stop.plateau_rounds:
        return Command(goto="finish", update={**update, "stop_reason": f"{streak} rounds without a promotion or a new best "
                                                                      f"held-out accuracy"})
    if _out_of_time(ctx):
        return Command(goto="finish", update={**update, "stop_reason": "wall-clock cap reached"})
    return Command(goto="train_segment", update=update)


def _tell_optimizer(ctx: CampaignContext, rnd: int, harness: HarnessSpec) -> None:
    """Record this round's decided numeric changes in their knobs' Optuna studies (asked ones are told)."""

    vo = ValueOptimizer(ctx.home, ctx.campaign_id, ctx.spec.seed)
    for knob in {p.knob for p in ctx.store.list_proposals(ctx.campaign_id, round=rnd)}:
        history = _knob_history(ctx, knob)
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) for _, _, v, _, _ in history):
            vo.sync(harness, knob, history)


def finish(state: CampaignState, runtime: Runtime[CampaignContext]) -> dict:
    ctx = runtime.context
    mainline = ctx.store.get_campaign(ctx.campaign_id).mainline_version
    done = {e.message.get("mainline") for e in ctx.store.events(ctx.campaign_id, kind="confirmation")}
    if ctx.spec.confirm and mainline is not None and mainline not in done:  # once per mainline handed over

        c = _guarded(ctx, "confirmation", state.get("round", 0), lambda: confirm(ctx.home, ctx.campaign_id, store=ctx.store,
                                                                                   score=_timed_score(ctx)), None)
        if c is not None:
            ctx.log(f"confirmed on {c.describe()}")
    status = "failed" if state.get("failed") else "finished"
    ctx.store.set_campaign(ctx.campaign_id, status=status)
    ctx.store.log_event(ctx.campaign_id, "finish", {"reason": state.get("stop_reason")})
    if ctx.mlflow_run_id:
        ctx.tracker.set_tags(ctx.mlflow_run_id, {"evotrainer.stop_reason": str(state.get("stop_reason"))[:4000]})
        ctx.tracker.end_run(ctx.mlflow_run_id, status.upper())
    ctx.log(f"campaign {status}: {state.get('stop_reason')}")
    return {}
