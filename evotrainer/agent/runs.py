"""Running a campaign's jobs: one branch or many through the launcher, each request typed by what it asks (fork,
steps, look), each outcome collected the same way; scoring policies on a split; the campaign's clock and stop.

Why apart from the nodes: every node that trains (the segment, the backtest, the merge) goes through these, so the
rules for naming, resuming and stopping a job live in one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evotrainer.agent.state import CampaignContext
from evotrainer.agent.values import ValueOptimizer
from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import (
    HarnessSpec,
)
from evotrainer.config.job import JobSpec
from evotrainer.core.domain import LedgerEntry
from evotrainer.core.runmeta import RunMeta, read_run_meta
from evotrainer.evidence.model import read_metrics
from evotrainer.jobs.launchers import JobOutcome, JobRequest
from evotrainer.jobs.lineage import complete_checkpoints
from evotrainer.jobs.scoring import MergeRequest, ScoreAnswer, ScoreRequest
from evotrainer.training.evaluation import read_outcomes, write_outcomes


class CampaignStopped(Exception):
    """Raised between jobs when a person ran `evotrainer campaign stop`; the node re-runs on resume."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


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


@dataclass(frozen=True)
class JobAsk:
    """What a node asks of one job: train ``name`` under ``harness`` for ``steps`` from ``fork`` (None: the base
    policy), with seed ``seed``, evaluating every ``eval_every`` steps, up to global step ``stop_at`` (a backtest's
    look; None: the job's end)."""

    name: str
    harness: HarnessSpec
    steps: int
    seed: int
    fork: str | None
    eval_every: int
    tags: dict[str, str]
    stop_at: int | None = None


class JobRead(BaseModel):
    """A job as the campaign reads it back at its ``step`` (``stop_at``, or its end): whether it got there, its
    held-out accuracy there, its training reward over the five steps before, its checkpoint and per-problem
    outcomes. ``steps`` counts what it trained in all."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    status: Literal["finished", "failed"]
    error: str | None = None
    run_id: str | None = None
    eval_accuracy: float | None = None
    train_reward: float | None = None
    steps: int = 0
    run_dir: Path
    checkpoint: str | None = None
    step: int
    outcomes: list[bool] | None = None


def _run(ctx: CampaignContext, ask: JobAsk) -> JobRead:
    """Run (or read back, or resume) one job (see :func:`_run_many`)."""
    return _run_many(ctx, [ask])[0]


def _run_many(ctx: CampaignContext, asks: list[JobAsk]) -> list[JobRead]:
    """Run (or read back, or resume) jobs side by side on the campaign's launcher, each up to its global step
    ``stop_at``; record the steps each trained in the ledger once per leg.

    Every job that still has steps to train is submitted at once (the launcher runs as many side by side as it has
    workers); the results are then read back from the job directories in the given order, so the ledger is written in
    the same order whatever finished first, and a ``kill -9`` in between leaves jobs that a re-run reads back or
    resumes.
    """
    # each new job's torch threads are its share of the whole list (the launcher's ``shares``), not of what is left
    # to train: a re-run after ``kill -9`` gives a job that had not started the count it would have had
    shares = ctx.pool.shares(len(asks))
    requests = [_request(ctx, ask, threads=n) for ask, n in zip(asks, shares, strict=True)]
    todo = [r for r in requests if r is not None]
    if todo:
        _while_workers_import(ctx)
    with _waiting(ctx, "jobs"):
        outcomes = iter(ctx.pool.run_many(todo) if todo else [])
    return [_collect(ctx, ask, None if req is None else next(outcomes)) for ask, req in zip(asks, requests)]


_IMPORTED_AHEAD = False


def _while_workers_import(ctx: CampaignContext) -> None:
    """Import what later nodes import on first use while the launcher's workers still import the training stack.

    Why: a campaign's first job waits ~4-5 s for its worker's torch/TRL imports (bench/log/06-the-demo-campaign.md), with this
    process idle on the other core, and later nodes then spend ~1 s of the campaign's own time importing Optuna
    and opening its study storage. Done once per process, and only while the workers are still busy, so it never
    delays a job whose worker is ready."""
    global _IMPORTED_AHEAD
    if _IMPORTED_AHEAD or not ctx.pool.warming():
        return
    _IMPORTED_AHEAD = True
    import evotrainer.agent.revise  # noqa: F401 - distill's labelling and propose's refuted changes
    import evotrainer.stats.screening  # noqa: F401

    if ctx.spec.values == "optuna":

        ValueOptimizer(ctx.home, ctx.campaign_id, ctx.spec.seed).storage()  # optuna, alembic, the study schema


def _request(ctx: CampaignContext, ask: JobAsk, threads: int | None = None):
    """The ``JobRequest`` that brings job ``ask.name`` to ``ask.stop_at``; None when there is nothing to train (paused
    at or past ``stop_at``, finished, or failed: a failed branch is a result, not something to retry). ``threads``: a
    new job's torch threads; a resumed one computes with its record's, which the request carries so that the launcher
    knows the cores it takes."""

    name, harness, steps, seed, fork, eval_every, tags, stop_at = (
        ask.name, ask.harness, ask.steps, ask.seed, ask.fork, ask.eval_every, ask.tags, ask.stop_at)
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
    raw = {
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
    raw["tags"] = {k: v for k, v in raw["tags"].items() if v}
    job = JobSpec.model_validate(raw)  # validated here, once: a bad job fails the campaign's node, not a worker
    upto = "" if stop_at is None else f" to step {stop_at}"
    ctx.log(f"{'resuming' if meta else 'running'} {name} ({steps} steps{upto})")
    target = meta.target_step if meta else None
    return JobRequest(job=job, home=str(ctx.home), fork=None if meta else fork, resume=name if meta else None,
                      stop_at=None if stop_at is None or stop_at == target else stop_at)


def _collect(ctx: CampaignContext, ask: JobAsk, outcome: JobOutcome | None) -> JobRead:
    """Read job ``ask.name`` back as it stands at ``ask.stop_at`` and ledger its new steps. ``outcome``: the
    launcher's ``JobOutcome`` when the job was just run (None: read back only)."""

    name, tags, stop_at = ask.name, ask.tags, ask.stop_at
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
    return JobRead(name=name, status="finished" if ok else "failed",
                   error=None if ok else (meta.error or f"no held-out evaluation and checkpoint at step {upto}"),
                   run_id=meta.run_id, eval_accuracy=acc, train_reward=reward, steps=trained, run_dir=run_dir,
                   checkpoint=str(ckpts[upto]) if upto in ckpts else None, step=upto,
                   outcomes=read_outcomes(run_dir, upto) if ok else None)


def _score(ctx: CampaignContext, policies: list[tuple[str, int]], split: str = "selection",
           merge: MergeRequest | None = None, record: list[tuple[Path, int]] | None = None) -> list[float] | None:
    """Greedy accuracies of saved policies on a held-out split, scored in the pool's worker; None if it failed
    (recorded as an event: the campaign then keeps its choice without it). ``merge`` (a
    :class:`evotrainer.jobs.scoring.MergeRequest`) has the worker average seeds into a new job first; its accuracy
    comes last. ``record``: a (run dir, step) per policy, where its per-problem outcomes are stored as that run's
    evaluation at that step (a merged job's own record, which :mod:`evotrainer.agent.movement` reads)."""

    sp = ctx.spec
    if not policies and merge is None:
        return []
    req = ScoreRequest(task=sp.task, task_options=sp.task_options, eval=sp.eval.model_copy(update={"k": 1}),
                       split=split, policies=policies, outcomes=record is not None, merge=merge)
    out = _timed_score(ctx)(req)
    if not out.ok:
        ctx.store.log_event(ctx.campaign_id, "scoring_error", {"split": split, "error": out.error})
        ctx.log(f"scoring on the {split} split failed: {out.error}")
        return None
    for (run_dir, step), outcomes in zip(record or [], out.outcomes or []):
        write_outcomes(run_dir, step, outcomes, split)
    return out.accuracies


def _waiting(ctx: CampaignContext, kind: str):
    """Time a wait on the worker in the campaign's node clock (``agent/clock.py``), when it has one."""
    from contextlib import nullcontext

    return ctx.clock.waiting(kind) if ctx.clock is not None else nullcontext()


def _timed_score(ctx: CampaignContext):
    """The launcher's ``score``, its wait timed as scoring."""
    def score(request: ScoreRequest) -> ScoreAnswer:
        with _waiting(ctx, "scoring"):
            return ctx.pool.score(request)
    return score
