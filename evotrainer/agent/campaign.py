"""Starting, resuming, stopping and rolling back campaigns: the graph's driver.

A campaign is a LangGraph thread (id = campaign id) plus its records in the state store plus a parent
MLflow run. ``run_campaign`` continues the thread from wherever it stopped: not started yet, interrupted
for review, or killed mid-node (LangGraph replays the node that was running; nodes are idempotent). With
``wait=True`` a campaign that reaches a review keeps polling the store and continues as soon as a person
approves or rejects from another process; with ``wait=False`` it returns and ``campaign resume`` picks it
up later.

One process at a time runs a campaign: ``run_campaign`` holds its lease (``evotrainer.agent.owner``), so a
second ``resume`` is refused with exit 2 naming the owner; ``stop_campaign`` signals the owner (or, with
``now``, ends it and its workers at once); ``rollback`` takes the lease for the moment it writes, so it works
on an interrupted or stopped campaign and is refused while an owner runs it.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field

from evotrainer.agent.brains.heuristic import HeuristicBrain
from evotrainer.agent.brains.llm import LLMBrain, LLMSettings
from evotrainer.agent.clock import REVIEW_WAIT, NodeClock, timings_path
from evotrainer.agent.lessons import campaign_library, source_library
from evotrainer.agent.runs import CampaignStopped
from evotrainer.agent.state import CampaignContext
from evotrainer.config.campaign import LIVE_SESSIONS, CampaignSpec, load_campaign_spec, spec_of
from evotrainer.config.harness import load_harness
from evotrainer.config.policy import budget_overflow
from evotrainer.core import procs
from evotrainer.core.domain import CampaignOwner
from evotrainer.core.errors import ConfigError, TaskError
from evotrainer.core.tracking import Tracker, tracking_uri
from evotrainer.diagnostics.registry import Registry
from evotrainer.diagnostics.revision import Archive
from evotrainer.jobs.launchers import make_launcher
from evotrainer.jobs.pool import PoolStopped, job_timeout_from_env
from evotrainer.library.loader import Library
from evotrainer.tasks import get_task
from evotrainer.training.evaluation import split_problems


def _store(home: Path):
    from evotrainer.store import Store

    return Store.for_home(home)


def _brain(spec: CampaignSpec):

    heuristic = HeuristicBrain(explore_threshold=spec.brain.explore_threshold, prior_strength=spec.brain.prior_strength)
    if spec.brain.kind == "heuristic":
        return heuristic

    settings = LLMSettings(**spec.brain.llm.model_dump())
    return LLMBrain(settings, fallback=heuristic, token_budget=spec.budget.llm_tokens)


def start_campaign(spec_path: Path, home: Path, log: Callable[[str], None] = print, wait: bool = True,
                   max_rounds: int | None = None, seed: int | None = None) -> str:
    """Validate the spec (nothing is written if it is invalid), create the campaign, run it.

    ``seed`` overrides the spec's ``seed`` (the mainline's data order, the brain's draws and, unless
    ``policy.seed`` is set, the warm start): one spec, several seeds (``make demo SEED=1``).
    """
    parsed, pool = _parsed(spec_path, seed), None
    if parsed.launcher.kind == "local":
        # A local worker spends ~7 s importing torch/TRL before its first job. The spec parsed, so start it now,
        # beside the rest of the validation (~1.5 s: the harness, the registry, the confirmation split) and the
        # set-up below; a spec refused there ends it at once. A Ray cluster is reached only for a valid spec.
        pool = launcher_for(parsed)
        pool.warm()
    try:
        spec, harness = _validated(spec_path, parsed)
        if pool is None:
            pool = launcher_for(spec)
            pool.warm()  # valid spec: connect now, beside the set-up below
        cid = _create(spec, harness, home)
    except BaseException:
        if pool is not None:
            pool.kill()  # nothing ran on it: its worker may still be importing, and nobody will use it
        raise
    log(f"campaign {cid} created")
    run_campaign(cid, home, log=log, wait=wait, max_rounds=max_rounds, pool=pool, purpose="start")
    return cid


def create_campaign(spec_path: Path, home: Path) -> str:
    """Validate the spec and create the campaign without running it (``campaign resume ID`` runs it)."""
    spec, harness = _validated(spec_path, _parsed(spec_path))
    return _create(spec, harness, home)


def _parsed(spec_path: Path, seed: int | None = None) -> CampaignSpec:
    """The spec as its file and ``seed`` give it, checked field by field (not yet against the files it names)."""
    spec = load_campaign_spec(spec_path)
    if seed is not None:
        if seed < 0:
            raise ConfigError(f"--seed {seed}: a seed is an integer >= 0")
        spec = spec.model_copy(update={"seed": seed})
    return spec


def _validated(spec_path: Path, spec: CampaignSpec) -> tuple[CampaignSpec, Any]:
    """``spec`` (from :func:`_parsed`) checked against what it names: harness, diagnostics, task, splits, paths."""

    harness = load_harness(spec.harness_path())
    Registry(harness)
    try:
        task = get_task(spec.task, spec.task_options)
    except TaskError as err:  # the task's own message, with the file and field that gave it
        raise TaskError(f"{spec_path}: task / task_options: {err}") from None
    if spec.confirm:  # refused now, not after the whole budget is spent (the held-out pool can be too small)

        try:
            split_problems(task, spec.eval, "confirmation", n=spec.confirm_n)
        except ConfigError as err:
            raise ConfigError(f"{spec_path}: eval / confirm_n: {err}") from None
    _check_paths(spec, spec_path)

    if (why := budget_overflow(harness.grpo.max_completion_length, spec.policy.context_length())) is not None:
        raise ConfigError(f"{spec.harness_path()}: {why}")  # refused now, not at the first segment
    return spec, harness


def _create(spec: CampaignSpec, harness: Any, home: Path) -> str:

    slug = re.sub(r"[^a-z0-9]+", "-", spec.name.lower()).strip("-")[:40] or "campaign"
    cid = f"{slug}-{datetime.now(timezone.utc).strftime('%Y%m%d%H%M%S')}"
    store = _store(home)
    doc = spec.model_dump(mode="json")
    doc["source_dir"] = spec.source_dir
    doc["initial_harness_version"] = harness.version
    store.create_campaign(cid, spec.name, doc, thread_id=cid)
    store.add_harness_version(harness.version, None, harness.model_dump(mode="json"), [])
    tracker = Tracker(home)
    run_id = tracker.create_run(cid, {"evotrainer.campaign": cid, "evotrainer.role": "campaign"},
                                {"task": spec.task, "harness": harness.version, "budget": spec.budget.total_steps})
    store.set_campaign(cid, mlflow_run_id=run_id)
    return cid


def job_timeout(spec: CampaignSpec) -> float | None:
    """Seconds one job (segment or branch) may run before it is ended and recorded failed; None: no limit.

    ``$EVOTRAINER_JOB_TIMEOUT_S`` for now (a campaign-spec field will take precedence once it exists).
    """

    minutes = getattr(spec.budget, "job_timeout_minutes", None)
    return minutes * 60.0 if minutes is not None else job_timeout_from_env()


def launcher_for(spec: CampaignSpec):
    """The launcher the spec's ``launcher`` section asks for (``evotrainer.jobs.launchers``), not started yet."""

    ls = spec.launcher
    return make_launcher(ls.kind, workers=ls.workers, timeout_s=job_timeout(spec), address=ls.address,
                         cpus=ls.cpus_per_job, gpus=ls.gpus_per_job,
                         live=ls.live_sessions if ls.live_sessions is not None else 0 if spec.policy.real else LIVE_SESSIONS)


def _check_paths(spec: CampaignSpec, spec_path: Path) -> None:
    """Paths the campaign reads later must exist now: a typo found in round 3 would cost the rounds before it."""

    lib = source_library(spec)
    if not lib.is_dir():
        raise ConfigError(f"{spec_path}: library: {lib} is not a folder; give a skill library folder (e.g. skills/ or "
                          "an earlier campaign's HOME/campaigns/ID/library), or leave it out for the seed library")
    if Library.load(lib, strict=False).problems:
        raise ConfigError(f"{spec_path}: library: {lib} has malformed files; run `evotrainer skills lint --library {lib}`")
    if spec.revision.archive:

        arch = spec.relative(spec.revision.archive)
        if not arch.is_file():
            raise ConfigError(f"{spec_path}: revision.archive: {arch} does not exist; give a labelled archive YAML "
                              "(runs: [{path, labels, invalid}]) or leave it out")
        Archive.load(arch)


def run_campaign(cid: str, home: Path, log: Callable[[str], None] = print, wait: bool = True,
                 max_rounds: int | None = None, poll_s: float = 1.0, pool: Any = None,
                 purpose: str = "resume") -> dict[str, Any]:
    """Continue campaign ``cid`` until it finishes, stops, or waits for a review (``wait=False``).

    ``pool``: a started launcher (``evotrainer.jobs.launchers``) to run jobs in (closed on return); by default the
    spec's ``launcher`` is made here.
    Raises ``CampaignBusy`` (exit 2) when another live process runs the campaign.
    """
    from evotrainer.agent.owner import Owner

    store = _store(home)
    try:
        camp = store.get_campaign(cid)
        if camp.status in ("finished", "failed"):
            log(f"campaign {cid} is {camp.status}")
            return {"status": camp.status}
        owner = Owner(store, cid, purpose, log).__enter__()  # refuses a second runner before anything starts
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    try:
        return _run_owned(cid, home, store, camp, owner, log, wait, max_rounds, poll_s, pool)
    finally:
        owner.__exit__(None, None, None)


def _run_owned(cid: str, home: Path, store: Any, camp: Any, owner: Any, log: Callable[[str], None], wait: bool,
               max_rounds: int | None, poll_s: float, pool: Any) -> dict[str, Any]:
    from evotrainer.agent.graph import compile_graph

    spec = spec_of(camp)
    graph = compile_graph(home)
    config = {"configurable": {"thread_id": camp.thread_id}, "recursion_limit": 10_000}
    if spec.trace:
        _trace(home)
    if pool is None:
        pool = launcher_for(spec)
        pool.warm()  # the worker's torch/TRL imports overlap the graph, store and library set-up below
    owner.watch(pool)  # its workers are recorded, and die with this process
    with pool:
        ctx = CampaignContext(campaign_id=cid, spec=spec, home=home, store=store, brain=_brain(spec), pool=pool,
                              tracker=Tracker(home), mlflow_run_id=camp.mlflow_run_id, log=log, started_at=time.time(),
                              library=campaign_library(home, cid, spec),
                              clock=NodeClock(timings_path(home, cid)))
        snap = graph.get_state(config)
        first, rnd = True, (snap.values or {}).get("round", 0)
        if not snap.values:
            payload: Any = {"campaign_id": cid, "round": 0, "mainline": None, "rounds_without_promotion": 0,
                            "harness_version": camp.spec["initial_harness_version"]}
        else:
            payload = Command(resume=True) if snap.interrupts else None
        while True:
            store.set_campaign(cid, status="running")
            # the process's set-up before the first stream (store, graph, library), a review wait before a later one
            ctx.clock.lap("open" if first else REVIEW_WAIT, rnd)
            first = False
            try:
                # durability="sync": each node's checkpoint is on disk before the next node starts, so a
                # kill -9 or an early return loses nothing that a node already did.
                for update in graph.stream(payload, config, context=ctx, stream_mode="updates", durability="sync"):
                    for node, values in (update.items() if isinstance(update, dict) else ()):
                        ctx.clock.lap(node, rnd)
                        if isinstance(values, dict) and isinstance(values.get("round"), int):
                            rnd = values["round"]  # distill moves on to the next round
                    done = (update.get("distill") or {}) if isinstance(update, dict) else {}
                    if max_rounds is not None and done.get("round", 0) >= max_rounds:
                        log(f"stopping after {max_rounds} round(s) as asked; resume to continue")
                        store.set_campaign(cid, status="stopped")
                        return {"status": "stopped"}
            except (CampaignStopped, PoolStopped):
                return _stopped(store, cid, owner, log)
            snap = graph.get_state(config)
            if not snap.next:
                return {"status": store.get_campaign(cid).status, "stop_reason": snap.values.get("stop_reason")}
            if snap.interrupts:
                pending = snap.interrupts[0].value.get("waiting_for_review", [])
                store.set_campaign(cid, status="waiting_review")
                log(f"waiting for review of {', '.join(pending)} (evotrainer review approve|reject ID)")
                if not wait:
                    return {"status": "waiting_review", "pending": pending}
                while any(store.get_review(p) is None for p in pending):
                    if owner.stopping or store.get_campaign(cid).status == "stopped":
                        return _stopped(store, cid, owner, log)
                    time.sleep(poll_s)
                payload = Command(resume=True)
            else:
                payload = None


def _stopped(store: Any, cid: str, owner: Any, log: Callable[[str], None]) -> dict[str, Any]:
    """The campaign was asked to stop (``campaign stop``, a signal) or lost its lease: leave it resumable."""
    if owner.lost:
        return {"status": "lost"}  # another process owns it now: write nothing more
    if owner.stop_requested is not None:
        store.log_event(cid, "stop", {"by": owner.stop_requested})
    store.set_campaign(cid, status="stopped")
    log(f"campaign {cid} stopped by request; `evotrainer campaign resume {cid}` continues")
    return {"status": "stopped"}


def _trace(home: Path) -> None:
    """LangGraph tracing into the campaign's MLflow experiment (spec ``trace: true``)."""
    import mlflow
    import mlflow.langchain


    mlflow.set_tracking_uri(tracking_uri(home))
    mlflow.set_experiment(experiment_id=Tracker(home).experiment_id)
    mlflow.langchain.autolog(silent=True)


class StopOutcome(BaseModel):
    """What ``campaign stop`` did (``--json``)."""

    model_config = ConfigDict(extra="forbid")

    campaign: str
    now: bool = Field(..., description="--now: the owner and its workers were killed at once (SIGKILL).")
    owner: CampaignOwner | None = Field(None, description="The live owner that was signalled, if there was one.")
    signal: str | None = Field(None, description="The signal sent to the owner (SIGTERM, or SIGKILL with --now).")
    ended: list[int] = Field(default_factory=list, description="Pids ended at once (--now): the owner and its workers.")
    exited: bool = Field(..., description="No live owner is left (it exited within the wait, or there was none).")
    message: str = Field(..., description="What happened, in words.")


def stop_campaign(cid: str, home: Path, now: bool = False, wait_s: float = 30.0) -> StopOutcome:
    """Stop campaign ``cid``: mark it stopped and signal its owner (SIGTERM), which abandons the job in flight and
    exits; wait up to ``wait_s`` for it. ``now``: kill the owner and its workers at once (SIGKILL).

    Without a live owner (a campaign waiting for review, an interrupted one) only the mark is set. An owner on
    another host (shared PostgreSQL store) sees the mark before its next job; ``now`` must run on that host.
    """

    store = _store(home)
    camp = store.get_campaign(cid)
    if camp.status in ("finished", "failed"):
        raise ConfigError(f"campaign {cid} is {camp.status}; there is nothing to stop")
    owner = camp.owner if camp.owner is not None and camp.owner.live else None
    if owner is not None and now and owner.host != procs.hostname():
        raise ConfigError(f"campaign {cid} runs on host {owner.host} (pid {owner.pid}); --now can only end a process "
                          f"on this host: run `evotrainer campaign stop {cid} --now` on {owner.host}, or leave out --now")
    store.set_campaign(cid, status="stopped")  # an owner elsewhere, or one waiting for a review, stops at its next look
    store.log_event(cid, "stop", {"by": "user", "now": now, "owner_pid": owner.pid if owner else None})
    if owner is None:
        return StopOutcome(campaign=cid, now=now, exited=True,
                           message=f"no live owner; {cid} is marked stopped (`evotrainer campaign resume {cid}` continues)")
    if owner.host != procs.hostname():
        return StopOutcome(campaign=cid, now=now, owner=owner, exited=False,
                           message=f"the owner (pid {owner.pid} on {owner.host}) stops before its next job")
    if now:
        ended = [owner.pid] if procs.end(owner.pid, owner.started) else []
        for r in store.list_processes(cid):  # they die with the owner anyway; end them here too, and say so
            if r.host == owner.host and procs.end(r.pid, r.started):
                ended.append(r.pid)
        return StopOutcome(campaign=cid, now=True, owner=owner, signal="SIGKILL", ended=ended, exited=True,
                           message=f"ended the owner (pid {owner.pid}) and its workers at once; the job in flight "
                                   f"resumes from its last checkpoint with `evotrainer campaign resume {cid}`")
    sent = procs.signal_process(owner.pid, owner.started, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while procs.alive(owner.pid, owner.started) and time.monotonic() < deadline:
        time.sleep(0.2)
    exited = not procs.alive(owner.pid, owner.started)
    return StopOutcome(campaign=cid, now=False, owner=owner, signal="SIGTERM" if sent else None, exited=exited,
                       message=(f"the owner (pid {owner.pid}) stopped" if exited else
                                f"the owner (pid {owner.pid}) is still stopping after {wait_s:g} s; "
                                f"`evotrainer campaign stop {cid} --now` ends it at once"))


def rollback(cid: str, version: str, home: Path, log: Callable[[str], None] = lambda _m: None) -> None:
    """Return the mainline to an earlier policy version (and its harness).

    Takes the campaign's lease while it writes: refused (exit 2) while an owner runs the campaign; works on a
    stopped, finished or interrupted one (an interrupted campaign stays interrupted, ready to resume).
    """
    from evotrainer.agent.graph import compile_graph

    store = _store(home)
    lineage = {pv.id: pv for pv in store.policy_lineage(cid)}
    if version not in lineage:
        raise ConfigError(f"campaign {cid} has no policy version '{version}'; versions: {', '.join(lineage) or 'none'}")
    lease = store.acquire_lease(cid, "rollback")
    try:
        if lease.took_over is not None:
            log(f"took over campaign {cid}: {lease.reason}")
        camp = store.get_campaign(cid)
        pv = lineage[version]
        graph = compile_graph(home)
        config = {"configurable": {"thread_id": camp.thread_id}}
        values = {"mainline": pv.id, "harness_version": pv.harness_version, "rounds_without_promotion": 0,
                  "best_accuracy": pv.eval_accuracy}
        pending = graph.get_state(config).next
        if pending:  # a plain update would consume the pending node's trigger and end the graph: route back to it
            graph.update_state(config, Command(update=values, goto=list(pending)), as_node=pending[0])
        else:
            graph.update_state(config, values)
        if camp.status == "finished":
            store.set_campaign(cid, mainline_version=pv.id, status="stopped")
        else:
            store.set_campaign(cid, mainline_version=pv.id)
        store.log_event(cid, "rollback", {"to": pv.id, "harness_version": pv.harness_version})
    finally:
        store.release_lease(cid, lease.token)
