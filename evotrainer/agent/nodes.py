"""The campaign's nodes: train segment → diagnose → propose → review → backtest → decide → distill.

Every node is safe to re-run after ``kill -9``: runs have deterministic names (a finished run is read
back, an interrupted one is resumed), and every record is written with an idempotent key (proposal ids,
one review and one decision per proposal, ledger entries keyed by run name). Routes are in each node's
``Command[Literal[...]]`` signature. The review node writes nothing before its ``interrupt()`` is
answered: LangGraph re-runs a node from its start on resume, so code before an interrupt runs twice.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from evotrainer.agent.brains.base import BrainContext, RefutedChange
from evotrainer.agent.fallback import BRAIN as BUILTIN
from evotrainer.agent.fallback import step_draft
from evotrainer.agent.movement import (
    STUCK_WHY,
    moves,
    noninferiority,
    outcomes_at,
    round_movement,
    round_stuck,
)
from evotrainer.agent.regression import REGRESSED_WHY, regressed, regression_finding
from evotrainer.agent.state import CampaignContext, CampaignState, segment_id
from evotrainer.backtest import decide, regression_margin
from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import (
    STEP_SIZE_KNOBS,
    HarnessSpec,
    diff,
    enlarges_update,
    locked_knob,
    shrinks_update,
)
from evotrainer.domain import BranchResult, Decision, PolicyVersion, Proposal, Review
from evotrainer.evidence import read_metrics
from evotrainer.jobs.runner import complete_checkpoints
from evotrainer.readers import read_job_dir
from evotrainer.runmeta import RunMeta, read_run_meta

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


def _remaining(ctx: CampaignContext) -> int:
    return ctx.spec.budget.total_steps - ctx.store.ledger_total(ctx.campaign_id)


def _out_of_time(ctx: CampaignContext) -> bool:
    cap = ctx.spec.budget.wall_clock_minutes
    return cap is not None and (time.time() - ctx.started_at) / 60 > cap


def _run(ctx: CampaignContext, name: str, harness: HarnessSpec, steps: int, seed: int, fork: str | None,
         eval_every: int, tags: dict[str, str], stop_at: int | None = None) -> dict[str, Any]:
    """Run (or read back, or resume) one job up to global step ``stop_at`` (see :func:`_run_many`)."""
    return _run_many(ctx, [(name, harness, steps, seed, fork, eval_every, tags, stop_at)])[0]


def _run_many(ctx: CampaignContext, jobs: list[tuple[str, HarnessSpec, int, int, str | None, int, dict[str, str],
                                                     int | None]]) -> list[dict[str, Any]]:
    """Run (or read back, or resume) jobs side by side on the campaign's launcher, each up to its global step
    ``stop_at`` (a backtest look; None: the job's end); record the steps each trained in the ledger once per leg.

    ``jobs``: (name, harness, steps, seed, fork, eval_every, tags, stop_at) tuples. Every job that still has steps
    to train is submitted at once (the launcher runs as many side by side as it has workers); the results are
    then read back from the job directories in the given order, so the ledger is written in the same order
    whatever finished first, and a ``kill -9`` in between leaves jobs that a re-run reads back or resumes.
    """
    # each new job's torch threads are its share of the whole list (the launcher's ``shares``), not of what is left
    # to train: a re-run after ``kill -9`` gives a job that had not started the count it would have had
    shares = ctx.pool.shares(len(jobs))
    requests = [_request(ctx, *job, threads=n) for job, n in zip(jobs, shares, strict=True)]
    todo = [r for r in requests if r is not None]
    if todo:
        _while_workers_import(ctx)
    with _waiting(ctx, "jobs"):
        outcomes = iter(ctx.pool.run_many(todo) if todo else [])
    return [_collect(ctx, job[0], job[6], job[7], None if req is None else next(outcomes))
            for job, req in zip(jobs, requests)]


_IMPORTED_AHEAD = False


def _while_workers_import(ctx: CampaignContext) -> None:
    """Import what later nodes import on first use while the launcher's workers still import the training stack.

    Why: a campaign's first job waits ~4-5 s for its worker's torch/TRL imports (bench/RESULTS.md §6), with this
    process idle on the other core, and later nodes then spend ~1 s of the campaign's own time importing Optuna
    and opening its study storage. Done once per process, and only while the workers are still busy, so it never
    delays a job whose worker is ready."""
    global _IMPORTED_AHEAD
    if _IMPORTED_AHEAD or not ctx.pool.warming():
        return
    _IMPORTED_AHEAD = True
    import evotrainer.agent.revise  # noqa: F401 - distill's labelling and propose's refuted changes
    import evotrainer.screening  # noqa: F401

    if ctx.spec.values == "optuna":
        from evotrainer.agent.values import ValueOptimizer

        ValueOptimizer(ctx.home, ctx.campaign_id, ctx.spec.seed).storage()  # optuna, alembic, the study schema


def _request(ctx: CampaignContext, name: str, harness: HarnessSpec, steps: int, seed: int, fork: str | None,
             eval_every: int, tags: dict[str, str], stop_at: int | None, threads: int | None = None):
    """The ``JobRequest`` that brings job ``name`` to ``stop_at``; None when there is nothing to train (paused at or
    past ``stop_at``, finished, or failed: a failed branch is a result, not something to retry). ``threads``: a new
    job's torch threads; a resumed one computes with its record's, which the request carries so that the launcher
    knows the cores it takes."""
    from evotrainer.jobs.launch import JobRequest

    meta = read_run_meta(ctx.home / "jobs" / name)
    if meta is not None and (meta.status in ("finished", "failed") or (stop_at is not None and meta.reached >= stop_at)):
        return None
    if ctx.store.get_campaign(ctx.campaign_id).status == "stopped":
        raise CampaignStopped(ctx.campaign_id)
    sp = ctx.spec
    policy = sp.policy
    if fork is None and policy.seed is None and seed != sp.seed:
        # a new job of another seed (a backtest branch from the base policy, after a rollback to it) trains the
        # campaign's base, not a warm start of its own seed
        policy = policy.model_copy(update={"seed": sp.seed})
    job = {
        "task": sp.task, "task_options": sp.task_options, "harness": harness.model_dump(mode="json"), "harness_dir": harness.source_dir,
        "steps": steps, "seed": seed, "policy": policy.model_dump(mode="json"),
        # a new job evaluates its start only when it is a segment (movement compares with it: agent/movement.py); a
        # branch from the base policy (after a rollback to it) is judged at its looks against its paired control,
        # like a fork, and 500 greedy episodes at step 0 of each of 9 branches would be 9 evaluations thrown away
        "eval": EvalSpec(**{**sp.eval.model_dump(), "every": eval_every,
                            "at_start": fork is None and tags.get("evotrainer.role") == "segment"}).model_dump(mode="json"),
        "save_every": eval_every, "name": name,
        "tags": {"mlflow.parentRunId": ctx.mlflow_run_id or "", "evotrainer.campaign": ctx.campaign_id, **tags},
        "threads": meta.spec.get("threads") if meta else threads,
    }
    job["tags"] = {k: v for k, v in job["tags"].items() if v}
    upto = "" if stop_at is None else f" to step {stop_at}"
    ctx.log(f"{'resuming' if meta else 'running'} {name} ({steps} steps{upto})")
    target = meta.target_step if meta else None
    return JobRequest(job=job, home=str(ctx.home), fork=None if meta else fork, resume=name if meta else None,
                      stop_at=None if stop_at is None or stop_at == target else stop_at)


def _collect(ctx: CampaignContext, name: str, tags: dict[str, str], stop_at: int | None, outcome: Any) -> dict[str, Any]:
    """Read job ``name`` back as it stands at ``stop_at`` and ledger its new steps: held-out accuracy there,
    training reward over the five steps before it, its checkpoint and its per-problem outcomes. ``outcome``: the
    launcher's ``JobOutcome`` when the job was just run (None: read back only)."""
    from evotrainer.domain import LedgerEntry
    from evotrainer.evaluation import read_outcomes

    run_dir = ctx.home / "jobs" / name
    meta = read_run_meta(run_dir) or RunMeta(status="failed")
    if outcome is not None and outcome.status != "finished":
        meta = meta.model_copy(update={"status": "failed", "error": outcome.error})
    target = meta.target_step
    upto = target if stop_at is None else stop_at
    metrics = read_metrics(run_dir) if run_dir.exists() else None
    if metrics is not None and "step" in metrics:
        metrics = metrics[metrics["step"] <= upto]
    trained = int(metrics["loss"].notna().sum()) if metrics is not None and "loss" in metrics else 0
    kind = "segment" if tags.get("evotrainer.role") == "segment" else "branch"
    key = name if stop_at is None else f"{name}@{upto}"
    before = sum(e.steps for e in ctx.store.ledger(ctx.campaign_id) if e.run_name == name and e.key != key)
    ctx.store.ledger_add(LedgerEntry(campaign_id=ctx.campaign_id, key=key, kind=kind, run_name=name,
                                     steps=max(0, trained - before), at=_now()))
    acc = None
    if metrics is not None and "eval/greedy_accuracy" in metrics:
        at = metrics.loc[metrics["step"] == upto, "eval/greedy_accuracy"].dropna()
        acc = float(at.iloc[-1]) if len(at) else None
    ckpts = complete_checkpoints(run_dir) if run_dir.exists() else {}
    reward = None
    if metrics is not None and "reward" in metrics and metrics["reward"].notna().any():
        reward = float(metrics["reward"].dropna().tail(5).mean())
    reached = meta.reached if meta.status != "failed" else -1
    # a 'running' job here is one that died (this process owns the campaign): its recorded looks stay readable
    ok = (meta.status in ("finished", "paused", "running", "interrupted") and reached >= upto
          and acc is not None and upto in ckpts)
    return {"name": name, "status": "finished" if ok else "failed",
            "error": None if ok else (meta.error or f"no held-out evaluation and checkpoint at step {upto}"),
            "run_id": meta.run_id, "eval_accuracy": acc, "train_reward": reward, "steps": trained,
            "run_dir": run_dir, "checkpoint": str(ckpts[upto]) if upto in ckpts else None, "step": upto,
            "outcomes": read_outcomes(run_dir, upto) if ok else None}


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
    lr 3e-4 took one warm start from 0.250 to 0.004, bench/RESULTS.md §7 session 26).
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


def _score(ctx: CampaignContext, policies: list[tuple[str, int]], split: str = "selection",
           merge: dict[str, Any] | None = None, record: list[tuple[Path, int]] | None = None) -> list[float] | None:
    """Greedy accuracies of saved policies on a held-out split, scored in the pool's worker; None if it failed
    (recorded as an event: the campaign then keeps its choice without it). ``merge`` (a
    :class:`evotrainer.jobs.scoring.MergeRequest`) has the worker average seeds into a new job first; its accuracy
    comes last. ``record``: a (run dir, step) per policy, where its per-problem outcomes are stored as that run's
    evaluation at that step (a merged job's own record, which :mod:`evotrainer.agent.movement` reads)."""
    from evotrainer.evaluation import write_outcomes

    sp = ctx.spec
    if not policies and merge is None:
        return []
    req = {"task": sp.task, "task_options": sp.task_options,
           "eval": sp.eval.model_copy(update={"k": 1}).model_dump(mode="json"), "split": split,
           "policies": [list(p) for p in policies], "outcomes": record is not None}
    if merge is not None:
        req["merge"] = merge
    out = _timed_score(ctx)(req)
    if not out["ok"]:
        ctx.store.log_event(ctx.campaign_id, "scoring_error", {"split": split, "error": out["error"]})
        ctx.log(f"scoring on the {split} split failed: {out['error']}")
        return None
    for (run_dir, step), outcomes in zip(record or [], out.get("outcomes") or []):
        write_outcomes(run_dir, step, outcomes, split)
    return [float(a) for a in out["accuracies"]]


def _waiting(ctx: CampaignContext, kind: str):
    """Time a wait on the worker in the campaign's node clock (``agent/clock.py``), when it has one."""
    from contextlib import nullcontext

    return ctx.clock.waiting(kind) if ctx.clock is not None else nullcontext()


def _timed_score(ctx: CampaignContext):
    """The launcher's ``score``, its wait timed as scoring."""
    def score(request: dict[str, Any]) -> dict[str, Any]:
        with _waiting(ctx, "scoring"):
            return ctx.pool.score(request)
    return score


def _finish(reason: str) -> Command:
    return Command(goto="finish", update={"stop_reason": reason})


# ---------------------------------------------------------------------------------------------- nodes
def train_segment(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["diagnose", "finish"]]:
    ctx, rnd = runtime.context, state["round"]
    name = f"{ctx.campaign_id}__r{rnd:02d}__segment"
    meta = read_run_meta(ctx.home / "jobs" / name)
    # the steps a backtest freed by stopping early go to the mainline (within what the budget still holds); once the
    # exploration share cannot pay for one more look, or a look would eat into budget.final_share, nothing is left to
    # backtest: the mainline trains the rest
    parent = ctx.store.get_policy_version(state["mainline"]) if state.get("mainline") else None
    steps = min(ctx.spec.segment_steps + int(state.get("bonus_steps") or 0), max(_remaining(ctx), 0))
    last = _explore_spent(ctx, parent, steps) and _remaining(ctx) >= ctx.spec.segment_steps
    if last:
        steps = _remaining(ctx)
    if meta is not None:
        steps = int(meta.spec["steps"])
    elif _remaining(ctx) < ctx.spec.segment_steps:
        return _finish(f"budget: {_remaining(ctx)} steps left, a segment needs {ctx.spec.segment_steps}")
    elif _out_of_time(ctx):
        return _finish("wall-clock cap reached")
    fork = _fork_of(parent)
    harness = _harness(ctx, state["harness_version"])
    res = _run(ctx, name, harness, steps, ctx.spec.seed, fork, steps,
               {"evotrainer.role": "segment", "evotrainer.round": str(rnd)})
    if res["status"] != "finished":
        return _finish(f"segment {name} failed: {res['error']}")
    pv = PolicyVersion(id=segment_id(ctx.campaign_id, rnd), campaign_id=ctx.campaign_id,
                       parent_id=state.get("mainline"), harness_version=harness.version, checkpoint=res["checkpoint"],
                       run_name=name, mlflow_run_id=res["run_id"], eval_accuracy=res["eval_accuracy"], step=res["step"],
                       created=_now())
    pv = ctx.store.add_policy_version(pv)
    if pv.selection_accuracy is None:  # what a rollback compares: the selection split (see _keep_best)
        # the first segment's start (the base policy) is judged on the same split: scored in the same call, beside it
        base = _unscored_start(ctx, pv)
        sel = _score(ctx, [(pv.checkpoint, harness.grpo.max_completion_length)] + ([base] if base else []))
        if sel:
            pv = ctx.store.set_version_accuracy(pv.id, sel[0])
            if base:
                _record_start(ctx, base[0], sel[1])
    ctx.log(f"round {rnd}: segment of {steps} steps done, held-out accuracy {res['eval_accuracy']} "
            f"(selection split {pv.selection_accuracy})")
    keep = _keep_best(ctx, rnd, pv)  # the backtest forks from here; the segment's evidence is still diagnosed
    ctx.store.set_campaign(ctx.campaign_id, mainline_version=keep.id)
    update = {"mainline": keep.id, "segment_run": name, "bonus_steps": 0}
    if _remaining(ctx) <= 0 and steps > ctx.spec.segment_steps:
        # this segment trained the rest of the budget (nothing was left to backtest): done
        return Command(goto="finish", update={**update, "stop_reason": f"budget spent: the last segment trained the "
                                                                       f"remaining {steps} steps on the mainline"})
    return Command(goto="diagnose", update=update)


def diagnose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["propose"]]:
    from evotrainer.diagnostics.registry import Registry

    ctx = runtime.context
    name = state["segment_run"]
    findings = Registry(_harness(ctx, state["harness_version"])).run(read_job_dir(ctx.home / "jobs" / name))
    if (fell := regression_finding(ctx, state["round"])) is not None:  # the segment was rolled back (agent/regression.py)
        findings = [fell, *findings]
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


def _knob_history(ctx: CampaignContext, knob: str) -> list[tuple[str, Any, Any, float | None, str]]:
    """This campaign's decided proposals of ``knob``: (proposal id, old value, new value, effect, outcome), for
    the optimizer (which learns from the moves: see agent/values.py)."""
    props = {p.id: p for p in ctx.store.list_proposals(ctx.campaign_id) if p.knob == knob}
    decided = ctx.store.get_decisions(list(props))
    return [(pid, props[pid].old, props[pid].new, None if d.stats is None else d.stats.effect, d.outcome)
            for pid, d in sorted(decided.items(), key=lambda kv: (props[kv[0]].round, kv[0]))]  # decision order


def _task_inert(ctx: CampaignContext) -> dict[str, str]:
    """The campaign task's inert knobs (``Task.inert_knobs``), built once per campaign process."""
    if ctx.task_inert is None:
        from evotrainer.tasks import get_task

        ctx.task_inert = get_task(ctx.spec.task, ctx.spec.task_options).inert_knobs()
    return ctx.task_inert


def _check_draft(ctx: CampaignContext, harness: HarnessSpec, knob: str, value: Any, symptom: str,
                 context: int | None, retest: bool = False) -> None:
    """Raise ConfigError when ``knob=value`` may not be proposed (the propose node's last line of defence).

    A re-test (:func:`_retests`) is not checked against the mistake notes: the notebook extrapolates from the
    values that failed (a ×3 raise refuted at −0.002 marks every larger raise), while this exact value measured a
    gain in this campaign, which is the stronger evidence.
    """
    from evotrainer.agent.lessons import overflows_context, repeated_mistake
    from evotrainer.errors import ConfigError

    harness.with_knob(knob, value)  # brains validate too
    if locked_knob(knob):
        raise ConfigError(f"{knob} is locked: diagnostics and gates judge proposals")
    inert = {**harness.inert_knobs(), **_task_inert(ctx)}
    if knob in inert:
        raise ConfigError(f"{knob} changes nothing here: {inert[knob]}")
    if (why := overflows_context(knob, value, context)) is not None:
        raise ConfigError(why)
    mistake = None if retest else repeated_mistake(ctx.library, harness, knob, value, symptom)
    if mistake:
        raise ConfigError(f"{knob}={value!r} repeats the known mistake {mistake} with no new symptom")


def propose(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["review", "distill"]]:
    """Ask the brain which knobs to change; ask Optuna how far (numeric knobs); screen what rollouts can predict.

    The brain is asked for a few drafts more than a round backtests, so that screened-out ones leave room for
    the next. A draft that screens as nil is recorded as a proposal with status and decision ``screened``
    (its numbers in the reasons) and is neither reviewed nor backtested.
    """
    ctx, rnd = runtime.context, state["round"]
    existing = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    if not existing:
        from evotrainer.agent.lessons import brain_inputs
        from evotrainer.agent.values import ValueOptimizer
        from evotrainer.errors import ConfigError

        harness = _harness(ctx, state["harness_version"])
        findings = ctx.store.list_findings(ctx.campaign_id, round=rnd)
        _explore_mode(ctx, state, rnd, findings, harness)
        hold = _still_improving(ctx, state, findings, harness)
        if hold is not None:
            if not any(e.message.get("round") == rnd for e in ctx.store.events(ctx.campaign_id, kind="explore_held")):
                ctx.store.log_event(ctx.campaign_id, "explore_held", {"round": rnd, **hold})
            ctx.log(f"round {rnd}: the mainline is still improving ({hold['before']:.3f} → {hold['after']:.3f} on the "
                    f"selection split over {hold['steps']} steps, {hold['gain'] / hold['se']:.1f} s.e.) and no finding "
                    f"is at warning: no backtest this round, the next segment trains {hold['steps']} steps more")
            return Command(goto="distill", update={"proposal_ids": [], "approved_ids": [], "hold_steps": hold["steps"]})
        # the library's skills are the candidates (their evidence is the prior); its mistakes count as refuted
        context = ctx.spec.policy.context_length()
        candidates, mistakes, known = brain_inputs(ctx.library, harness, findings, ctx.spec.task, store=ctx.store,
                                                   context=context, task_inert=_task_inert(ctx))
        candidates = _retests(ctx, harness) + candidates
        knobs = harness.knobs()
        # only what enlarges the update can act on a policy that does not move (agent/movement.py), only what shrinks
        # it on a recipe that undid the policy (agent/regression.py); a regressed round moved, so it is never stuck
        fell = regressed(findings)
        stuck = not fell and round_stuck(ctx, rnd)
        step = "larger" if stuck else "smaller" if fell else None
        acts = enlarges_update if stuck else shrinks_update
        if step:
            candidates = [c for c in candidates if acts(c.knob, knobs.get(c.knob), c.value)]
        k = ctx.spec.backtest.max_proposals
        bctx = BrainContext(harness=harness, findings=findings, candidates=candidates, mistakes=mistakes,
                            refuted=_refuted(ctx) + known, max_proposals=k + (2 if ctx.spec.screen else 0),
                            min_effect=ctx.spec.backtest.min_effect,
                            task=ctx.spec.task, task_inert=_task_inert(ctx), seed=ctx.spec.seed, round=rnd,
                            only_knobs=list(STEP_SIZE_KNOBS) if step else None, only_step=step,
                            only_why=STUCK_WHY if stuck else REGRESSED_WHY if fell else "")
        result = ctx.brain.propose(bctx)
        builtin = False  # the round's drafts are the campaign's own step-size draft and its bracket (agent/fallback.py)
        if step:  # a brain may draft outside its candidates (an LLM does): the same rule, re-tests first
            movers = [d for d in result.drafts if acts(d.knob, knobs.get(d.knob), d.value)]
            dropped = [f"{d.knob}={d.value!r}" for d in result.drafts if d not in movers]
            movers.sort(key=lambda d: not _is_retest(d))
            why = "the mainline is stuck" if stuck else "the mainline regressed"
            notes = [*result.notes, *([f"{why}: dropped {', '.join(dropped)} (only changes that make the update "
                                       f"{step} can act on it)"] if dropped else [])]
            # the library offered no such change (a brain that declined one it offered is not overruled)
            if not movers and not candidates and (fb := step_draft(harness, step, bctx.refuted)) is not None:
                movers, builtin = [fb], True
                notes.append(f"{why} and the library has no change that makes the update {step}: the built-in "
                             f"{fb.knob} → {fb.value!r}")
            result = result.model_copy(update={"drafts": movers, "notes": notes})
        ctx.store.log_event(ctx.campaign_id, "brain", {"round": rnd, "brain": result.brain, "notes": result.notes,
                                                       "tokens": result.tokens})
        values = ValueOptimizer(ctx.home, ctx.campaign_id, ctx.spec.seed) if ctx.spec.values == "optuna" else None
        drafts, brackets = _bracketed(harness, result.drafts, k if ctx.spec.backtest.bracket else 0,
                                      ctx.spec.backtest.bracket_factor, ctx.spec.backtest.bracket_range, stuck=stuck)
        # When none of the round's drafts can be proposed and a stuck round had moved its first draft (to the interim
        # and the bracket, which can both reach a value a known mistake refuted: countdown seed 1 spent 12 stuck
        # rounds backtesting nothing, bench/RESULTS.md §7 session 32), that draft's own value is backtested instead.
        own = [d for d in result.drafts if d not in drafts][:1] if brackets else []
        kept = 0
        for i, d in enumerate([*drafts, *own]):
            if kept >= k or (i >= len(drafts) and kept):
                break
            pid = f"{ctx.campaign_id}:r{rnd:02d}:p{i}"
            value, rationale = d.value, d.rationale
            try:
                _check_draft(ctx, harness, d.knob, value, d.hypothesis.symptom, context, retest=_is_retest(d))
                if values is not None:
                    values.sync(harness, d.knob, _knob_history(ctx, d.knob))
                    fixed = brackets.get(i) or ("retest" if _is_retest(d) else None)
                    choice = values.suggest(pid, harness, d.knob, value, rnd, fixed=fixed)
                    if choice.value != value:
                        try:
                            _check_draft(ctx, harness, d.knob, choice.value, d.hypothesis.symptom, context)
                            value = choice.value
                        except ConfigError as err:  # the draft's own value stands
                            ctx.store.log_event(ctx.campaign_id, "value_refused", {
                                "round": rnd, "knob": d.knob, "value": choice.value, "error": str(err)})
                    if choice.source != "fixed":
                        rationale = f"{rationale}; {choice.describe()}"[:2000]
            except ConfigError as err:
                ctx.store.log_event(ctx.campaign_id, "invalid_draft", {"round": rnd, "knob": d.knob, "error": str(err)})
                continue
            screening = _screen(ctx, state, harness, d.knob, value) if ctx.spec.screen else None
            status = "screened" if screening is not None and screening.nil else "pending_review"
            ctx.store.add_proposal(Proposal(
                id=pid, campaign_id=ctx.campaign_id, round=rnd, knob=d.knob, old=knobs[d.knob], new=value,
                hypothesis=d.hypothesis, rationale=rationale, cited_skills=d.cited_skills,
                brain=BUILTIN if builtin else result.brain,
                status=status, harness_version=harness.version, created=_now()))
            if screening is not None and screening.screenable:
                ctx.store.log_event(ctx.campaign_id, "screening", {"round": rnd, "proposal": pid,
                                                                   **screening.model_dump(mode="json")})
            if status == "screened":
                ctx.store.add_decision(Decision(proposal_id=pid, outcome="screened", at=_now(), reasons=[
                    screening.describe(), "not backtested: the change would leave the training signal as it is"]))
            else:
                kept += 1
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


def _still_improving(ctx: CampaignContext, state: CampaignState, findings: list,
                     harness: HarnessSpec) -> dict[str, Any] | None:
    """The last segment's gain when exploration should wait for it (spec ``budget.improving_z``), else None.

    The segment must be the mainline (not rolled back from), no finding may be at warning or critical, and its
    selection-split accuracy must exceed its parent's by more than ``improving_z`` standard errors (two independent
    binomial samples of ``eval.n``: conservative, the split's problems are the same). Round 0's parent is the base
    policy, scored on the selection split once (an ``explore_start`` event keeps it, so a resume does not rescore).
    """
    z = ctx.spec.budget.improving_z
    if z is None or any(f.severity in ("warning", "critical") and f.symptom != "diagnostic_error" for f in findings):
        return None
    pv = ctx.store.get_policy_version(state["mainline"]) if state.get("mainline") else None
    if pv is None or pv.run_name != state.get("segment_run") or pv.selection_accuracy is None:
        return None
    if pv.parent_id is not None:
        parent = ctx.store.get_policy_version(pv.parent_id)
        before, steps = (parent.selection_accuracy, pv.step - parent.step) if parent else (None, 0)
    else:
        before, steps = _start_selection(ctx, pv, harness), pv.step
    if before is None or steps <= 0:
        return None
    after = pv.selection_accuracy
    se = _gain_se(before, after, ctx.spec.eval.n)
    if after - before <= z * se:
        return None
    return {"before": before, "after": after, "gain": round(after - before, 6), "se": round(se, 6), "steps": steps,
            "z": z}


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
    −2.8..−0.3; bench/RESULTS.md §7, session 29). A recipe that moves and has no warning is training, not failing;
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
    selection-split score yet, but a rollback, ``budget.improving_z`` or ``budget.healthy_explore_share`` will read
    one (:func:`_start_selection`); else None."""
    sp = ctx.spec
    if first.parent_id is not None or not first.run_name or not (
            sp.rollback.enabled or sp.budget.improving_z is not None or sp.budget.healthy_explore_share is not None) \
            or ctx.store.events(ctx.campaign_id, kind="explore_start"):
        return None
    meta = read_run_meta(ctx.home / "jobs" / first.run_name)
    start = ctx.store.get_campaign(ctx.campaign_id).spec.get("initial_harness_version")
    if meta is None or not meta.base_policy or start is None:
        return None
    return meta.base_policy, _harness(ctx, start).grpo.max_completion_length


RETEST = "retest-"  # id prefix of a re-test candidate (:func:`_retests`)


def _is_retest(draft: Any) -> bool:
    return any(c.startswith(RETEST) for c in draft.cited_skills)


def _retests(ctx: CampaignContext, harness: HarnessSpec) -> list:
    """Inconclusive changes that measured a gain, offered once more as candidates, with that gain as evidence.

    Why: an inconclusive backtest is not a refutation, but no library skill proposes its value again. A bracket
    arm (a learning rate moved 1e-6 → 2.7e-5) that gained +0.011 in 30 steps on a slow-learning warm start, too
    little to decide, was never tried again: the skill's own ×3 step had been refuted, so the knob dropped out,
    and the campaign ended where it started. A change is re-tested once (its value backtested twice at most),
    only while its knob still has the value it was tested from (after the knob moved, the old step means
    something else), and only when its effect was above ``backtest.min_effect``; it is backtested as it was,
    neither bracketed nor re-valued by Optuna.
    """
    from evotrainer.domain import Candidate
    from evotrainer.errors import ConfigError

    knobs = harness.knobs()
    props = ctx.store.list_proposals(ctx.campaign_id)
    decided = ctx.store.get_decisions([p.id for p in props])
    tried: dict[tuple[str, str], int] = {}
    for p in props:
        if p.id in decided:
            tried[(p.knob, repr(p.new))] = tried.get((p.knob, repr(p.new)), 0) + 1
    out, seen = [], set()
    for p in props:
        d = decided.get(p.id)
        key = (p.knob, repr(p.new))
        if (d is None or d.outcome != "inconclusive" or d.stats is None or d.stats.effect <= ctx.spec.backtest.min_effect
                or tried[key] > 1 or key in seen or knobs.get(p.knob) != p.old):
            continue
        try:
            harness.with_knob(p.knob, p.new)
        except ConfigError:  # a value this harness no longer accepts is no candidate
            continue
        seen.add(key)
        out.append(Candidate(
            id=f"{RETEST}{p.id}", symptoms=[p.hypothesis.symptom], knob=p.knob, value=p.new, source="this campaign",
            description=f"re-test {p.knob} → {p.new!r}: inconclusive in round {p.round} at {d.stats.effect:+.3f} "
                        f"({d.stats.ci_low:+.3f}..{d.stats.ci_high:+.3f})",
            effects=[d.stats.effect]))
    return out


def _bracketed(harness: HarnessSpec, drafts: list, k: int, factor: float | None = None,
               bands: dict[str, tuple[float, float]] | None = None,
               stuck: bool = False) -> tuple[list, dict[int, str]]:
    """The brain's drafts with a bracket arm (spec ``backtest.bracket``), and where the fixed values came from:
    ``{index: "bracket" | "interim"}`` (:class:`~evotrainer.agent.values.ValueChoice`'s sources).

    When one of the drafts the round would backtest (the first ``k``) moves a scale knob, that draft takes the
    first slot and the same knob moved ``factor`` (``backtest.bracket_factor``) times as far in log scale the
    second, backtested against the same control (×3 and ×243 for a learning rate); the other drafts move down.
    Why: a learning rate 300× too small gains +0.005 in a 30-step branch from a ×3 raise, too little to decide
    (on one warm start it read −0.002 and was refuted), while the bracket shows which decade the knob belongs in.
    If both are promoted the larger effect wins (``decide_node``); both arms are trials of the knob's Optuna
    study. ``k`` < 2 (or 0: bracketing off) leaves the drafts as they are. ``bands`` (``backtest.bracket_range``,
    the spec's default when None) keeps the bracket inside each knob's usual band: from a value already there
    (a tuned learning rate) there is no bracket, and the round's next draft takes the slot.

    **In a stuck round** (``stuck``: agent/movement.py) the first arm moves to the *interim* value, the geometric
    middle of the draft's value and the bracket's (×27 beside ×243 for a learning rate). Why: the round is stuck
    because the current step changes nothing, and a ×3 raise of it moved the policy in no measured branch
    (0.4-2.8 % of answers, bench/RESULTS.md §7 sessions 21-23), so that arm could only ever be inconclusive, while
    the right rate may lie between the two ends: on agentic ×3 moved nothing and ×243 collapsed on one seed of
    three at once and on another over 200 steps, and the campaign never tried the decades between.
    """
    from evotrainer.agent.values import BRACKET_FACTOR, bracket_value, move_of
    from evotrainer.config.campaign import BRACKET_RANGE

    factor = BRACKET_FACTOR if factor is None else factor
    if k < 2 or not drafts:
        return list(drafts), {}
    knobs = harness.knobs()
    first, value = next(((d, v) for d in drafts[:k] if not _is_retest(d)
                         and (v := bracket_value(harness, d.knob, knobs.get(d.knob), d.value, factor,
                                                 (BRACKET_RANGE if bands is None else bands).get(d.knob)))
                         is not None),
                        (None, None))
    if first is None:
        return list(drafts), {}
    current = knobs.get(first.knob)
    if any(d.knob == first.knob and d.value == value for d in drafts):
        return list(drafts), {}
    factor = move_of(first.knob, current, value) / move_of(first.knob, current, first.value)  # < factor if clipped

    def arm(v: float, change: str, why: str):  # the draft moved to ``v``, saying how and why
        return first.model_copy(update={
            "value": v, "hypothesis": first.hypothesis.model_copy(update={"change": f"{first.knob}: {current!r} → "
                                                                                   f"{v!r}, {change}"[:300]}),
            "rationale": f"{why}; {first.rationale}"[:2000]})

    bracket = arm(value, f"a bracket of {first.value!r} ({factor:.3g}× the move in log scale)",
                  f"bracket of the brain's draft ({first.knob} → {first.value!r}): the same knob moved {factor:.3g} "
                  "times as far in log scale, backtested beside the round's first arm against the same control")
    rest = [d for d in drafts if d is not first]
    middle = float(f"{math.sqrt(first.value * value):.3g}") if stuck else None
    if middle is None or middle in (current, value) or any(d.knob == first.knob and d.value == middle for d in rest):
        return [first, bracket, *rest], {1: "bracket"}
    interim = arm(middle, f"the geometric middle of {first.value!r} and the bracket {value!r} (the mainline is stuck)",
                  f"interim arm of a stuck round: the draft's {first.knob} → {first.value!r} moved to the geometric "
                  f"middle of it and the bracket {value!r}, since the current step changes no answer and a small "
                  "raise of it moved none in any measured branch")
    return [interim, bracket, *rest], {0: "interim", 1: "bracket"}


def _screen(ctx: CampaignContext, state: CampaignState, harness: HarnessSpec, knob: str, value: Any):
    """Screen a change on this round's segment rollouts (None when it cannot be, or the screening failed)."""
    from evotrainer.screening import SCREENABLE, screen_run
    from evotrainer.tasks import get_task

    if knob not in SCREENABLE or not state.get("segment_run"):
        return None
    try:
        return screen_run(ctx.home / "jobs" / state["segment_run"], harness, knob, value,
                          get_task(ctx.spec.task, ctx.spec.task_options))
    except Exception as err:  # noqa: BLE001 - screening is an optimisation: a failure means "backtest it"
        ctx.store.log_event(ctx.campaign_id, "screening_error", {"round": state["round"], "knob": knob,
                                                                 "error": f"{type(err).__name__}: {err}"})
        return None


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


def _branch_name(ctx: CampaignContext, rnd: int, role: str, index: int | None, seed: int) -> str:
    return f"{ctx.campaign_id}__r{rnd:02d}__{role}{'' if index is None else index}__s{seed}"


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
                  project_futility=b.project_futility, last=last, noninferior=margin, moves=moves)


def backtest(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["decide", "distill"]]:
    """Control and treatments × paired seeds from the mainline's checkpoint, one look at a time.

    At each look every open arm's branches train to the look's step (paused jobs resume) and are evaluated on
    the decision split; each open proposal then gets the sequential rule (``evotrainer.backtest``). A decided
    proposal's branches stop there; the control goes on while any proposal is open; a promotion ends the
    backtest (only one change is adopted a round, so the others would be re-tested on the new mainline
    anyway). Everything is re-derived from the job directories, so a re-run after ``kill -9`` retrains nothing
    and decides the same.
    """
    from evotrainer.diagnostics.gates import check_gate
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.evidence import evidence_upto
    from evotrainer.store import NotFound

    ctx, rnd = runtime.context, state["round"]
    bt_id = f"{ctx.campaign_id}:r{rnd:02d}:backtest"
    b = ctx.spec.backtest
    seeds = _seeds(ctx, rnd)
    parent = ctx.store.get_policy_version(state["mainline"])
    try:
        planned = ctx.store.get_backtest(bt_id)
    except NotFound:
        planned = None
    if planned is None:
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
            return Command(goto="distill", update={"backtest_id": None})
        ctx.store.add_backtest(bt_id, ctx.campaign_id, rnd, approved[:k], seeds, b.branch_steps)
        planned = ctx.store.get_backtest(bt_id)
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
        legs = [(pid, role, index, h, seed) for seed in seeds for pid, role, index, h in arms
                if not ((pid is not None and pid not in open_) or (pid, seed) in branches
                        and branches[(pid, seed)].status == "failed")]
        # every arm × seed of this look at once: the launcher runs as many side by side as it has workers
        results = _run_many(ctx, [(_branch_name(ctx, rnd, role, index, seed), h, b.branch_steps, seed, fork, every,
                                   {"evotrainer.role": role, "evotrainer.proposal": pid or "",
                                    "evotrainer.round": str(rnd), "evotrainer.seed": str(seed)}, upto)
                                  for pid, role, index, h, seed in legs])
        for (pid, role, _index, _h, seed), res in zip(legs, results):
            name = res["name"]
            gate = None
            if role == "treatment" and res["status"] == "finished":
                gate = check_gate(evidence_upto(read_job_dir(res["run_dir"]), upto), registry,
                                  final=look == b.looks)
            entry = {"look": look, "step": upto, "trained": every * look, "status": res["status"], "error": res["error"],
                     "eval_accuracy": res["eval_accuracy"], "train_reward": res["train_reward"],
                     # None for a control, and for a gate that had too little evidence yet at an interim look
                     "gate_passed": None if gate is None else (False if gate.reasons else
                                                               (None if gate.undecided else True)),
                     "gate_reasons": [] if gate is None else gate.reasons}
            prev = branches.get((pid, seed))
            branches[(pid, seed)] = BranchResult(
                backtest_id=bt_id, proposal_id=pid, role=role, seed=seed, run_name=name, status=res["status"],
                error=res["error"], eval_accuracy=res["eval_accuracy"], train_reward=res["train_reward"],
                gate_passed=entry["gate_passed"], gate_reasons=entry["gate_reasons"], steps=res["steps"],
                step=res["step"], looks=[*(prev.looks if prev else []), entry])
        listed = list(branches.values())
        decided = {pid: d for pid in open_ if (d := _decide_look(ctx, pid, listed, look, parent)) is not None}
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


def _larger_step(ctx: CampaignContext, best: Decision, decisions: list[Decision],
                 branches: list[BranchResult]) -> tuple[Decision, str] | None:
    """A stuck round's larger raise to adopt in place of the promoted smaller one ``best`` (spec
    ``backtest.stuck_prefer_larger``), with why; None when there is none.

    The candidates are the round's other proposals on ``best``'s knob that raise the update further, left open (an
    ``inconclusive`` decision) at the look ``best`` was promoted at. One is adopted when the data do not show it
    worse: its effect over the control is positive, every branch finished with its gate passed, no seed sits more
    than ``backtest.stuck_margin`` below its control (a raise that diverged on one seed is a raise too far), and its
    per-problem paired interval against ``best``'s branches (:func:`evotrainer.backtest.effect_interval`, at
    ``backtest.confidence``) reaches 0. Of several, the largest. Why: a look 10-30 steps in is biased toward the
    smaller step (short-horizon bias, Wu et al. 2018, "Understanding Short-Horizon Bias in Stochastic
    Meta-Optimization"): a larger step's gain compounds over the steps the mainline has left, and a smaller one that
    merely reads level after 10 steps can stall there (agentic seeds 0 and 3, bench/RESULTS.md §7 session 35). This
    proves no gain over the control (rule ``larger_step``); the selection-split rollback (:func:`_keep_best`) guards
    the mainline after it.
    """
    from evotrainer.backtest import effect_interval

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


def decide_node(state: CampaignState, runtime: Runtime[CampaignContext]) -> Command[Literal["distill"]]:
    """Each proposal's decision at the look its branches stopped at (the rule the backtest stopped them by)."""
    ctx = runtime.context
    bt_id = state["backtest_id"]
    planned = ctx.store.get_backtest(bt_id)
    branches = ctx.store.list_branches(bt_id)
    parent = ctx.store.get_policy_version(state["mainline"])  # the backtest forked from it; distill moves it on
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
        d = _decide_look(ctx, pid, branches, last, parent, undecided="inconclusive", last=budget_last)
        if d.outcome == "inconclusive" and last < ctx.spec.backtest.looks:
            why = (f"the backtest stopped here: {stopped[0]['reason']}" if stopped else
                   "the backtest stopped here because another proposal was promoted; re-test it on the new mainline")
            d = d.model_copy(update={"reasons": [*d.reasons, why]})
        decisions.append(d)
    promoted = [d for d in decisions if d.outcome == "promote"]
    # a change shown better outranks one shown only not worse (a stuck round's non-inferiority), then the effect; a
    # larger step adopted before a kill (it is stored first) stays adopted on resume
    top = max(promoted, key=lambda d: (d.stats.rule == "larger_step", d.stats.rule == "superiority", d.stats.effect),
              default=None)
    larger = None if top is None or top.stats.rule == "larger_step" else _larger_step(ctx, top, decisions, branches)
    if larger is not None:
        d, why = larger
        decisions = [x.model_copy(update={"outcome": "promote", "reasons": [*x.reasons, why],
                                          "stats": x.stats.model_copy(update={"rule": "larger_step"})})
                     if x.proposal_id == d.proposal_id else x for x in decisions]
        top = next(x for x in decisions if x.proposal_id == d.proposal_id)
    best = top.proposal_id if top is not None else None
    displaced = (f"{best}, a larger raise of the same knob, was adopted in its place" if top is not None
                 and top.stats.rule == "larger_step" else
                 f"{best} had a larger effect and was promoted this round; re-test on the new mainline")
    for d in sorted(decisions, key=lambda d: d.proposal_id != best):  # the adopted one first (see above)
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
            merge = {"home": str(ctx.home), "name": f"{ctx.campaign_id}__r{rnd:02d}__merged", "max_new_tokens": budget,
                     "sources": [[x.run_name, x.step] for x, _ in cands],
                     "tags": {"evotrainer.campaign": ctx.campaign_id, "evotrainer.round": str(rnd)}}
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
            merged = {"run": merge["name"], "step": cands[0][0].step, "selection_accuracy": sel[len(cands)],
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


def _freed(ctx: CampaignContext, bt_id: str | None) -> int:
    """Steps a backtest planned but did not spend (it stopped early): the next segment trains them."""
    if not bt_id:
        return 0
    bt = ctx.store.get_backtest(bt_id)
    planned = (1 + len(bt.proposal_ids)) * len(bt.seeds) * bt.branch_steps
    names = {x.run_name for x in ctx.store.list_branches(bt_id)}
    spent = sum(e.steps for e in ctx.store.ledger(ctx.campaign_id) if e.run_name in names)
    return max(0, planned - spent)


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
    held = int(state.get("hold_steps") or 0)  # a round that held exploration: its next segment trains as long again
    freed = _freed(ctx, bt_id) + held
    pv = ctx.store.get_policy_version(mainline)
    if not _last_round(ctx, pv, freed, bool(best or held), state.get("rounds_without_promotion", 0)):
        pv = _decision_scored(ctx, pv)
    acc = pv.eval_accuracy
    prev_best = state.get("best_accuracy")
    improved = acc is not None and (prev_best is None or acc > prev_best + ctx.spec.backtest.min_effect)
    streak = 0 if best or improved or held else state.get("rounds_without_promotion", 0) + 1
    seen = [a for a in (acc, prev_best) if a is not None]
    update = {"round": rnd + 1, "mainline": mainline, "harness_version": version, "rounds_without_promotion": streak,
              "best_accuracy": max(seen) if seen else None, "bonus_steps": freed, "hold_steps": None,
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


def _last_round(ctx: CampaignContext, mainline: PolicyVersion, bonus: int, reset: bool, streak: int) -> bool:
    """Whether no round follows this distill's: fewer steps are left than a segment needs, or the next segment
    trains the rest of the budget and the campaign then finishes (:func:`train_segment`'s own tests). With no stop
    rule reading it now either, nothing reads the mainline's decision-split accuracy, and :func:`_decision_scored`
    need not score a merged average on that split.

    Why: a round after the next segment reads it (its movement, :mod:`evotrainer.agent.movement`; the check of a
    promotion that fell, :mod:`evotrainer.agent.revise`), as do ``stop.target_accuracy`` and, unless the round
    promoted or held (``reset``), ``stop.plateau_rounds``. Without those an evaluation of 500 greedy episodes (~3 s of
    agentic's 400-step campaign) is thrown away. The same test as :func:`train_segment`'s for its last segment.
    """
    stop, steps = ctx.spec.stop, ctx.spec.segment_steps
    if stop.target_accuracy is not None or (not reset and streak + 1 >= stop.plateau_rounds):
        return False
    rest = _remaining(ctx)
    return rest < steps or (rest > steps and _explore_spent(ctx, mainline, min(steps + bonus, rest)))


def _tell_optimizer(ctx: CampaignContext, rnd: int, harness: HarnessSpec) -> None:
    """Record this round's decided numeric changes in their knobs' Optuna studies (asked ones are told)."""
    from evotrainer.agent.values import ValueOptimizer

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
        from evotrainer.agent.confirm import confirm

        c = _guarded(ctx, "confirmation", state.get("round", 0), lambda: confirm(ctx.home, ctx.campaign_id, store=ctx.store,
                                                                                   score=_timed_score(ctx)), None)
        if c is not None:
            ctx.log(f"confirmed on {c.describe()}")
    ctx.store.set_campaign(ctx.campaign_id, status="finished")
    ctx.store.log_event(ctx.campaign_id, "finish", {"reason": state.get("stop_reason")})
    if ctx.mlflow_run_id:
        ctx.tracker.set_tags(ctx.mlflow_run_id, {"evotrainer.stop_reason": str(state.get("stop_reason"))[:4000]})
        ctx.tracker.end_run(ctx.mlflow_run_id, "FINISHED")
    ctx.log(f"campaign finished: {state.get('stop_reason')}")
    return {}
