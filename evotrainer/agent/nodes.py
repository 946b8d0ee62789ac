"""The campaign's nodes: train segment → diagnose → propose → review → backtest → decide → distill.

Every node is safe to re-run after ``kill -9``: runs have deterministic names (a finished run is read
back, an interrupted one is resumed), and every record is written with an idempotent key (proposal ids,
one review and one decision per proposal, ledger entries keyed by run name). Routes are in each node's
``Command[Literal[...]]`` signature. The review node writes nothing before its ``interrupt()`` is
answered: LangGraph re-runs a node from its start on resume, so code before an interrupt runs twice.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from evotrainer.agent.brains.base import BrainContext, RefutedChange
from evotrainer.agent.schemas import BranchResult, PolicyVersion, Proposal, Review
from evotrainer.agent.state import CampaignContext, CampaignState
from evotrainer.backtest import decide, regression_margin
from evotrainer.config import HarnessSpec, diff, dump_harness, locked_knob
from evotrainer.evaluation import EvalSpec
from evotrainer.evidence import load_run_evidence, read_metrics
from evotrainer.jobs.runner import complete_checkpoints

STATUS_OF = {"promote": "promoted", "reject": "refuted", "inconclusive": "inconclusive", "blocked": "blocked",
             "failed": "failed"}


class CampaignStopped(Exception):
    """Raised between jobs when a person ran `evotrainer campaign stop`; the node re-runs on resume."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ---------------------------------------------------------------------------------------------- helpers
def _harness(ctx: CampaignContext, version: str) -> HarnessSpec:
    hv = ctx.store.get_harness_version(version)
    spec = HarnessSpec.model_validate(hv.spec)
    spec.source_dir = str(ctx.spec.harness_path().resolve().parent)
    return spec


def _harness_file(ctx: CampaignContext, harness: HarnessSpec) -> Path:
    path = ctx.home / "campaigns" / ctx.campaign_id / "harnesses" / f"{harness.version}.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(dump_harness(harness))
        tmp.replace(path)
    return path


def _remaining(ctx: CampaignContext) -> int:
    return ctx.spec.budget.total_steps - ctx.store.ledger_total(ctx.campaign_id)


def _out_of_time(ctx: CampaignContext) -> bool:
    cap = ctx.spec.budget.wall_clock_minutes
    return cap is not None and (time.time() - ctx.started_at) / 60 > cap


def _run(ctx: CampaignContext, name: str, harness: HarnessSpec, steps: int, seed: int, fork: str | None,
         eval_every: int, tags: dict[str, str]) -> dict[str, Any]:
    """Run (or read back, or resume) one job in the branch pool; record its steps in the ledger once."""
    from evotrainer.agent.schemas import LedgerEntry

    run_dir = ctx.home / "jobs" / name
    meta_file = run_dir / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else None
    # finished or failed: read back (a failed branch is a result, not something to retry); else run or resume
    if meta is None or meta.get("status") not in ("finished", "failed"):
        if ctx.store.get_campaign(ctx.campaign_id).status == "stopped":
            raise CampaignStopped(ctx.campaign_id)
        sp = ctx.spec
        job = {
            "task": sp.task, "task_options": sp.task_options, "harness": str(_harness_file(ctx, harness)),
            "steps": steps, "seed": seed, "policy": sp.policy.model_dump(mode="json"),
            "eval": EvalSpec(**{**sp.eval.model_dump(), "every": eval_every, "at_start": fork is None}).model_dump(mode="json"),
            "save_every": steps, "name": name,
            "tags": {"mlflow.parentRunId": ctx.mlflow_run_id or "", "evotrainer.campaign": ctx.campaign_id, **tags},
        }
        job["tags"] = {k: v for k, v in job["tags"].items() if v}
        ctx.log(f"{'resuming' if meta else 'running'} {name} ({steps} steps)")
        out = ctx.pool.run(job, ctx.home, fork=None if meta else fork, resume=name if meta else None)
        meta = json.loads(meta_file.read_text()) if meta_file.exists() else {"status": "failed"}
        if not out["ok"]:
            meta = {**meta, "status": "failed", "error": out["error"]}
    metrics = read_metrics(run_dir) if run_dir.exists() else None
    trained = 0
    if metrics is not None and "loss" in metrics:
        trained = int(metrics["loss"].notna().sum())
    kind = "segment" if tags.get("evotrainer.role") == "segment" else "branch"
    ctx.store.ledger_add(LedgerEntry(campaign_id=ctx.campaign_id, key=name, kind=kind, run_name=name, steps=trained,
                                     at=_now()))
    acc = None
    if metrics is not None and "eval/greedy_accuracy" in metrics:
        s = metrics["eval/greedy_accuracy"].dropna()
        acc = float(s.iloc[-1]) if len(s) else None
    ckpts = complete_checkpoints(run_dir) if run_dir.exists() else {}
    reward = None
    if metrics is not None and "reward" in metrics and metrics["reward"].notna().any():
        reward = float(metrics["reward"].dropna().tail(5).mean())
    return {"name": name, "status": meta.get("status"), "error": meta.get("error"), "run_id": meta.get("run_id"),
            "eval_accuracy": acc, "train_reward": reward, "steps": trained, "run_dir": run_dir,
            "checkpoint": str(ckpts[max(ckpts)]) if ckpts else None, "step": max(ckpts) if ckpts else None}


def _keep_best(ctx: CampaignContext, rnd: int, current: PolicyVersion) -> PolicyVersion:
    """The version the mainline goes on from: ``current``, or its best ancestor when ``current``'s held-out
    accuracy fell below it by more than :func:`regression_margin` (spec ``rollback``).

    Only ancestors count (a version a person rolled back from is not one), and only those measured within the
    same completion budget as ``current``: each version's held-out accuracy is played within its own
    harness's budget, and a promoted shorter budget must not read as a regression. Only the checkpoint goes
    back: the harness stays the mainline's, since each of its changes won a backtest (``campaign rollback``
    by hand restores both). ``current`` stays in the lineage, so the decline is on record, and the event is
    written once per declined version, so a re-run node after ``kill -9`` decides the same way without a
    second line.
    """
    sp = ctx.spec
    if not sp.rollback.enabled or current.eval_accuracy is None:
        return current
    by_id = {pv.id: pv for pv in ctx.store.policy_lineage(ctx.campaign_id)}
    budget = _harness(ctx, current.harness_version).grpo.max_completion_length
    earlier, parent = [], current.parent_id
    while parent is not None and parent in by_id:
        pv = by_id[parent]
        if pv.eval_accuracy is not None and pv.checkpoint and \
                _harness(ctx, pv.harness_version).grpo.max_completion_length == budget:
            earlier.append(pv)
        parent = pv.parent_id
    if not earlier:
        return current
    best = max(earlier, key=lambda pv: pv.eval_accuracy)
    margin = regression_margin(best.eval_accuracy, current.eval_accuracy, sp.eval.n, sp.rollback.confidence,
                               sp.backtest.min_effect)
    if best.eval_accuracy - current.eval_accuracy <= margin:
        return current
    if not any(e.message.get("from") == current.id for e in ctx.store.events(ctx.campaign_id, kind="regression_rollback")):
        ctx.store.log_event(ctx.campaign_id, "regression_rollback", {
            "round": rnd, "from": current.id, "to": best.id, "from_accuracy": current.eval_accuracy,
            "to_accuracy": best.eval_accuracy, "margin": round(margin, 6)})
    ctx.log(f"round {rnd}: held-out {current.eval_accuracy:.3f} is below the best version {best.id} "
            f"({best.eval_accuracy:.3f}) by more than {margin:.3f}; the mainline goes back to it")
    return best


def _finish(reason: str) -> Command:
    return Command(goto="finish", update={"stop_reason": reason})


# ---------------------------------------------------------------------------------------------- nodes
def train_segment(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["diagnose", "finish"]]:
    ctx, rnd = runtime.context, state["round"]
    name = f"{ctx.campaign_id}__r{rnd:02d}__segment"
    started = (ctx.home / "jobs" / name / "meta.json").exists()
    if not started and (_remaining(ctx) < ctx.spec.segment_steps):
        return _finish(f"budget: {_remaining(ctx)} steps left, a segment needs {ctx.spec.segment_steps}")
    if not started and _out_of_time(ctx):
        return _finish("wall-clock cap reached")
    parent = ctx.store.get_policy_version(state["mainline"]) if state.get("mainline") else None
    fork = f"{parent.run_name}@{parent.step}" if parent and parent.run_name else None
    harness = _harness(ctx, state["harness_version"])
    res = _run(ctx, name, harness, ctx.spec.segment_steps, ctx.spec.seed, fork, ctx.spec.segment_steps,
               {"evotrainer.role": "segment", "evotrainer.round": str(rnd)})
    if res["status"] != "finished":
        return _finish(f"segment {name} failed: {res['error']}")
    pv = PolicyVersion(id=f"{ctx.campaign_id}:r{rnd:02d}:segment", campaign_id=ctx.campaign_id,
                       parent_id=state.get("mainline"), harness_version=harness.version, checkpoint=res["checkpoint"],
                       run_name=name, mlflow_run_id=res["run_id"], eval_accuracy=res["eval_accuracy"], step=res["step"],
                       created=_now())
    ctx.store.add_policy_version(pv)
    ctx.log(f"round {rnd}: segment done, held-out accuracy {res['eval_accuracy']}")
    keep = _keep_best(ctx, rnd, pv)  # the backtest forks from here; the segment's evidence is still diagnosed
    ctx.store.set_campaign(ctx.campaign_id, mainline_version=keep.id)
    return Command(goto="diagnose", update={"mainline": keep.id, "segment_run": name})


def diagnose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["propose"]]:
    from evotrainer.diagnostics.registry import Registry

    ctx = runtime.context
    name = state["segment_run"]
    findings = Registry(_harness(ctx, state["harness_version"])).run(load_run_evidence(ctx.home / "jobs" / name))
    ctx.store.add_findings(ctx.campaign_id, state["round"], name, findings)
    ctx.log("findings: " + (", ".join(f"{f.severity} {f.symptom}" for f in findings if f.severity != "info") or "none"))
    return Command(goto="propose")


def _refuted(ctx: CampaignContext) -> list[RefutedChange]:
    """Changes this campaign rejected or blocked, each with every symptom (warning or worse) of its round.

    A brain reopens a refuted change only on new evidence: a serious symptom that was absent when it failed.
    Recording just the symptom the proposal cited would count its round's other findings as new, and the
    campaign would backtest a blocked trap again in the very next round.
    """
    from evotrainer.agent.revise import accepted_false_positives

    out = []
    reopened = accepted_false_positives(ctx.store, ctx.campaign_id)  # blocked by a gate that has since been fixed
    seen: dict[int, list[str]] = {}
    for d in ctx.store.list_decisions(ctx.campaign_id):
        if d.outcome == "reject" or (d.outcome == "blocked" and d.proposal_id not in reopened):
            p = ctx.store.get_proposal(d.proposal_id)
            if p.round not in seen:
                seen[p.round] = [f.symptom for f in ctx.store.list_findings(ctx.campaign_id, round=p.round)
                                 if f.severity != "info"]
            symptoms = list(dict.fromkeys([p.hypothesis.symptom, *seen[p.round]]))
            out.append(RefutedChange(knob=p.knob, value=p.new, outcome=d.outcome, symptoms=symptoms))
    return out


def propose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["review", "distill"]]:
    ctx, rnd = runtime.context, state["round"]
    existing = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    if not existing:
        from evotrainer.agent.lessons import brain_inputs, overflows_context, repeated_mistake

        harness = _harness(ctx, state["harness_version"])
        findings = ctx.store.list_findings(ctx.campaign_id, round=rnd)
        # the library's skills are the candidates (their evidence is the prior); its mistakes count as refuted
        context = ctx.spec.policy.context_length()
        candidates, mistakes, known = brain_inputs(ctx.library, harness, findings, ctx.spec.task, store=ctx.store,
                                                   context=context)
        bctx = BrainContext(harness=harness, findings=findings, candidates=candidates, mistakes=mistakes,
                            refuted=_refuted(ctx) + known, max_proposals=ctx.spec.backtest.max_proposals,
                            min_effect=ctx.spec.backtest.min_effect,
                            task=ctx.spec.task, seed=ctx.spec.seed, round=rnd)
        result = ctx.brain.propose(bctx)
        ctx.store.log_event(ctx.campaign_id, "brain", {"round": rnd, "brain": result.brain, "notes": result.notes,
                                                       "tokens": result.tokens})
        knobs = harness.knobs()
        from evotrainer.errors import ConfigError

        inert = harness.inert_knobs()
        for i, d in enumerate(result.drafts):
            try:
                harness.with_knob(d.knob, d.value)  # brains validate too; this is the last line of defence
                if locked_knob(d.knob):
                    raise ConfigError(f"{d.knob} is locked: diagnostics and gates judge proposals")
                if d.knob in inert:
                    raise ConfigError(f"{d.knob} changes nothing in this harness: {inert[d.knob]}")
                if (why := overflows_context(d.knob, d.value, context)) is not None:
                    raise ConfigError(why)
                mistake = repeated_mistake(ctx.library, harness, d.knob, d.value, d.hypothesis.symptom)
                if mistake:
                    raise ConfigError(f"{d.knob}={d.value!r} repeats the known mistake {mistake} with no new symptom")
            except ConfigError as err:
                ctx.store.log_event(ctx.campaign_id, "invalid_draft", {"round": rnd, "knob": d.knob, "error": str(err)})
                continue
            ctx.store.add_proposal(Proposal(
                id=f"{ctx.campaign_id}:r{rnd:02d}:p{i}", campaign_id=ctx.campaign_id, round=rnd, knob=d.knob,
                old=knobs[d.knob], new=d.value, hypothesis=d.hypothesis, rationale=d.rationale,
                cited_skills=d.cited_skills, brain=result.brain, status="pending_review",
                harness_version=harness.version, created=_now()))
        existing = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    for p in existing:
        ctx.log(f"proposal {p.id}: {p.knob} {p.old!r} → {p.new!r} ({p.hypothesis.symptom})")
    if not existing:
        return Command(goto="distill", update={"proposal_ids": [], "approved_ids": []})
    return Command(goto="review", update={"proposal_ids": [p.id for p in existing]})


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


def _seeds(ctx: CampaignContext, rnd: int) -> list[int]:
    return [10_000 + 100 * rnd + 7 * ctx.spec.seed + i for i in range(ctx.spec.backtest.seeds)]


def backtest(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["decide", "distill"]]:
    from evotrainer.diagnostics.gates import check_gate
    from evotrainer.diagnostics.registry import Registry

    ctx, rnd = runtime.context, state["round"]
    bt_id = f"{ctx.campaign_id}:r{rnd:02d}:backtest"
    b = ctx.spec.backtest
    seeds = _seeds(ctx, rnd)
    from evotrainer.store import NotFound

    try:
        planned = ctx.store.get_backtest(bt_id)
    except NotFound:
        planned = None
    if planned is None:
        approved = list(state["approved_ids"])
        k = len(approved)
        while k and _remaining(ctx) < (1 + k) * len(seeds) * b.branch_steps:
            k -= 1
        for pid in approved[k:]:
            ctx.store.set_proposal_status(pid, "skipped_budget")
        if k == 0:
            ctx.log("backtest skipped: it does not fit in the remaining budget")
            return Command(goto="distill", update={"backtest_id": None})
        ctx.store.add_backtest(bt_id, ctx.campaign_id, rnd, approved[:k], seeds, b.branch_steps)
        planned = ctx.store.get_backtest(bt_id)
    harness = _harness(ctx, state["harness_version"])
    parent = ctx.store.get_policy_version(state["mainline"])
    fork = f"{parent.run_name}@{parent.step}"
    arms = [(None, "control", harness)] + [
        (pid, "treatment", harness.with_knob((p := ctx.store.get_proposal(pid)).knob, p.new)) for pid in planned.proposal_ids]
    for pid in planned.proposal_ids:
        ctx.store.set_proposal_status(pid, "backtesting")
    for seed in seeds:
        for i, (pid, role, h) in enumerate(arms):
            name = f"{ctx.campaign_id}__r{rnd:02d}__{role}{'' if pid is None else i}__s{seed}"
            res = _run(ctx, name, h, b.branch_steps, seed, fork, b.branch_steps,
                       {"evotrainer.role": role, "evotrainer.proposal": pid or "", "evotrainer.round": str(rnd),
                        "evotrainer.seed": str(seed)})
            gate = None
            if role == "treatment" and res["status"] == "finished":  # judged by the mainline's gate, not its own
                gate = check_gate(load_run_evidence(res["run_dir"]), Registry(harness))
            ctx.store.add_branch(BranchResult(
                backtest_id=bt_id, proposal_id=pid, role=role, seed=seed, run_name=name,
                status="finished" if res["status"] == "finished" else "failed", error=res["error"],
                eval_accuracy=res["eval_accuracy"], train_reward=res["train_reward"],
                gate_passed=None if gate is None else gate.passed, gate_reasons=[] if gate is None else gate.reasons,
                steps=res["steps"]))
    return Command(goto="decide", update={"backtest_id": bt_id})


def decide_node(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["distill"]]:
    ctx = runtime.context
    bt_id = state["backtest_id"]
    planned = ctx.store.get_backtest(bt_id)
    branches = ctx.store.list_branches(bt_id)
    control = [x for x in branches if x.role == "control"]
    decisions = []
    for pid in planned.proposal_ids:
        existing = ctx.store.get_decision(pid)
        if existing is not None:
            decisions.append(existing)
            continue
        treat = [x for x in branches if x.proposal_id == pid]
        decisions.append(decide(pid, control, treat, ctx.spec.backtest.min_effect, ctx.spec.backtest.confidence))
    promoted = [d for d in decisions if d.outcome == "promote"]
    best = max(promoted, key=lambda d: d.stats.effect).proposal_id if promoted else None
    for d in decisions:
        if d.outcome == "promote" and d.proposal_id != best:
            d = d.model_copy(update={"outcome": "inconclusive", "reasons": [
                *d.reasons, f"{best} had a larger effect and was promoted this round; re-test on the new mainline"]})
        ctx.store.add_decision(d)
        ctx.store.set_proposal_status(d.proposal_id, STATUS_OF[d.outcome])
        ctx.log(f"decision {d.proposal_id}: {d.outcome} — {d.reasons[0]}")
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
    from evotrainer.agent.lessons import curate_round
    from evotrainer.agent.revise import campaign_revisions, refuted_blocks

    harness = _guarded(ctx, "revision", rnd, lambda: campaign_revisions(ctx, rnd, bt_id, harness), harness)
    ops = _guarded(ctx, "curation", rnd, lambda: curate_round(ctx, bt_id, refuted_blocks(ctx.store, ctx.campaign_id)), [])
    if ops:
        ctx.store.log_event(ctx.campaign_id, "curation", {"round": rnd, "ops": ops})
        ctx.log("library: " + ", ".join(f"{o['op']} {o['slug']}" for o in ops))
    version = harness.version
    if bt_id:
        branches = ctx.store.list_branches(bt_id)
        seed0 = _seeds(ctx, rnd)[0]
        if best:
            pick = [x for x in branches if x.proposal_id == best and x.seed == seed0 and x.status == "finished"]
        else:
            pick = [x for x in branches if x.role == "control" and x.seed == seed0 and x.status == "finished"]
        if pick:  # the branch already trained the next steps under the (new) mainline harness: keep them
            br = pick[0]
            meta = json.loads((ctx.home / "jobs" / br.run_name / "meta.json").read_text())
            ck = complete_checkpoints(ctx.home / "jobs" / br.run_name)
            pv = PolicyVersion(id=f"{ctx.campaign_id}:r{rnd:02d}:{'promoted' if best else 'control'}",
                               campaign_id=ctx.campaign_id, parent_id=mainline, harness_version=version,
                               checkpoint=str(ck[max(ck)]), run_name=br.run_name, mlflow_run_id=meta.get("run_id"),
                               eval_accuracy=br.eval_accuracy, step=max(ck), created=_now())
            ctx.store.add_policy_version(pv)
            mainline = _keep_best(ctx, rnd, pv).id
            ctx.store.set_campaign(ctx.campaign_id, mainline_version=mainline)
    acc = ctx.store.get_policy_version(mainline).eval_accuracy
    prev_best = state.get("best_accuracy")
    improved = acc is not None and (prev_best is None or acc > prev_best + ctx.spec.backtest.min_effect)
    streak = 0 if best or improved else state.get("rounds_without_promotion", 0) + 1
    seen = [a for a in (acc, prev_best) if a is not None]
    update = {"round": rnd + 1, "mainline": mainline, "harness_version": version, "rounds_without_promotion": streak,
              "best_accuracy": max(seen) if seen else None,
              "proposal_ids": [], "approved_ids": [], "backtest_id": None, "promoted": None, "segment_run": None}
    if ctx.mlflow_run_id:
        ctx.tracker.log_metrics(ctx.mlflow_run_id, rnd, {"campaign/mainline_accuracy": acc if acc is not None else float("nan"),
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


def finish(state: CampaignState, runtime: Runtime[CampaignContext]) -> dict:
    ctx = runtime.context
    mainline = ctx.store.get_campaign(ctx.campaign_id).mainline_version
    done = {e.message.get("mainline") for e in ctx.store.events(ctx.campaign_id, kind="confirmation")}
    if ctx.spec.confirm and mainline is not None and mainline not in done:  # once per mainline handed over
        from evotrainer.agent.confirm import confirm

        c = _guarded(ctx, "confirmation", state.get("round", 0), lambda: confirm(ctx.home, ctx.campaign_id, store=ctx.store), None)
        if c is not None:
            ctx.log(f"confirmed on {c.describe()}")
    ctx.store.set_campaign(ctx.campaign_id, status="finished")
    ctx.store.log_event(ctx.campaign_id, "finish", {"reason": state.get("stop_reason")})
    if ctx.mlflow_run_id:
        ctx.tracker.set_tags(ctx.mlflow_run_id, {"evotrainer.stop_reason": str(state.get("stop_reason"))[:4000]})
        ctx.tracker.end_run(ctx.mlflow_run_id, "FINISHED")
    ctx.log(f"campaign finished: {state.get('stop_reason')}")
    return {}
