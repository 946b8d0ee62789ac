"""Starting, resuming, stopping and rolling back campaigns: the graph's driver.

A campaign is a LangGraph thread (id = campaign id) plus its records in the state store plus a parent
MLflow run. ``run_campaign`` continues the thread from wherever it stopped: not started yet, interrupted
for review, or killed mid-node (LangGraph replays the node that was running; nodes are idempotent). With
``wait=True`` a campaign that reaches a review keeps polling the store and continues as soon as a person
approves or rejects from another process; with ``wait=False`` it returns and ``campaign resume`` picks it
up later.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from langgraph.types import Command

from evotrainer.agent.spec import CampaignSpec, load_campaign_spec
from evotrainer.agent.state import CampaignContext
from evotrainer.errors import ConfigError


def _store(home: Path):
    from evotrainer.store import Store

    return Store.for_home(home)


def _brain(spec: CampaignSpec):
    from evotrainer.agent.brains.heuristic import HeuristicBrain

    heuristic = HeuristicBrain(explore_threshold=spec.brain.explore_threshold, prior_strength=spec.brain.prior_strength)
    if spec.brain.kind == "heuristic":
        return heuristic
    from evotrainer.agent.brains.llm import LLMBrain, LLMSettings

    settings = LLMSettings(**spec.brain.llm.model_dump())
    return LLMBrain(settings, fallback=heuristic, token_budget=spec.budget.llm_tokens)


def start_campaign(spec_path: Path, home: Path, log: Callable[[str], None] = print, wait: bool = True,
                   max_rounds: int | None = None) -> str:
    """Validate the spec (nothing is written if it is invalid), create the campaign, run it."""
    from evotrainer.config import load_harness
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.tasks import get_task
    from evotrainer.tracking import Tracker

    spec = load_campaign_spec(spec_path)
    harness = load_harness(spec.harness_path())
    Registry(harness)
    get_task(spec.task, spec.task_options)
    _check_paths(spec, spec_path)
    from evotrainer.policy import budget_overflow

    if (why := budget_overflow(harness.grpo.max_completion_length, spec.policy.context_length())) is not None:
        raise ConfigError(f"{spec.harness_path()}: {why}")  # refused now, not at the first segment
    from evotrainer.jobs.pool import BranchPool

    pool = BranchPool(workers=1)
    pool.warm()  # valid spec: start the worker's ~5 s of torch/TRL imports now, beside the set-up below
    try:
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
    except BaseException:
        pool.close()
        raise
    log(f"campaign {cid} created")
    run_campaign(cid, home, log=log, wait=wait, max_rounds=max_rounds, pool=pool)
    return cid


def _check_paths(spec: CampaignSpec, spec_path: Path) -> None:
    """Paths the campaign reads later must exist now: a typo found in round 3 would cost the rounds before it."""
    from evotrainer.agent.lessons import source_library
    from evotrainer.errors import ConfigError
    from evotrainer.library.loader import Library

    lib = source_library(spec)
    if not lib.is_dir():
        raise ConfigError(f"{spec_path}: library: {lib} is not a folder; give a skill library folder (e.g. skills/ or "
                          "an earlier campaign's HOME/campaigns/ID/library), or leave it out for the seed library")
    if Library.load(lib, strict=False).problems:
        raise ConfigError(f"{spec_path}: library: {lib} has malformed files; run `evotrainer skills lint --library {lib}`")
    if spec.revision.archive:
        from evotrainer.diagnostics.revision import Archive

        arch = spec.relative(spec.revision.archive)
        if not arch.is_file():
            raise ConfigError(f"{spec_path}: revision.archive: {arch} does not exist; give a labelled archive YAML "
                              "(runs: [{path, labels, invalid}]) or leave it out")
        Archive.load(arch)


def _spec_of(campaign) -> CampaignSpec:
    doc = dict(campaign.spec)
    src = doc.pop("source_dir", None)
    doc.pop("initial_harness_version", None)
    spec = CampaignSpec.model_validate(doc)
    spec.source_dir = src
    return spec


def run_campaign(cid: str, home: Path, log: Callable[[str], None] = print, wait: bool = True,
                 max_rounds: int | None = None, poll_s: float = 1.0, pool: Any = None) -> dict[str, Any]:
    """Continue campaign ``cid`` until it finishes, stops, or waits for a review (``wait=False``).

    ``pool``: a started ``BranchPool`` to run jobs in (closed on return); by default one is made here.
    """
    from evotrainer.agent.graph import compile_graph
    from evotrainer.agent.lessons import campaign_library
    from evotrainer.agent.nodes import CampaignStopped
    from evotrainer.jobs.pool import BranchPool
    from evotrainer.tracking import Tracker

    store = _store(home)
    camp = store.get_campaign(cid)
    if camp.status == "finished":
        if pool is not None:
            pool.close()
        log(f"campaign {cid} is finished")
        return {"status": camp.status}
    spec = _spec_of(camp)
    graph = compile_graph(home)
    config = {"configurable": {"thread_id": camp.thread_id}, "recursion_limit": 10_000}
    if spec.trace:
        _trace(home)
    if pool is None:
        pool = BranchPool(workers=1)
        pool.warm()  # the worker's torch/TRL imports overlap the graph, store and library set-up below
    with pool:
        ctx = CampaignContext(campaign_id=cid, spec=spec, home=home, store=store, brain=_brain(spec), pool=pool,
                              tracker=Tracker(home), mlflow_run_id=camp.mlflow_run_id, log=log, started_at=time.time(),
                              library=campaign_library(home, cid, spec))
        snap = graph.get_state(config)
        if not snap.values:
            payload: Any = {"campaign_id": cid, "round": 0, "mainline": None, "rounds_without_promotion": 0,
                            "harness_version": camp.spec["initial_harness_version"]}
        else:
            payload = Command(resume=True) if snap.interrupts else None
        while True:
            store.set_campaign(cid, status="running")
            try:
                # durability="sync": each node's checkpoint is on disk before the next node starts, so a
                # kill -9 or an early return loses nothing that a node already did.
                for update in graph.stream(payload, config, context=ctx, stream_mode="updates", durability="sync"):
                    done = (update.get("distill") or {}) if isinstance(update, dict) else {}
                    if max_rounds is not None and done.get("round", 0) >= max_rounds:
                        log(f"stopping after {max_rounds} round(s) as asked; resume to continue")
                        store.set_campaign(cid, status="stopped")
                        return {"status": "stopped"}
            except CampaignStopped:
                log(f"campaign {cid} stopped by request; resume to continue")
                return {"status": "stopped"}
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
                    if store.get_campaign(cid).status == "stopped":
                        return {"status": "stopped"}
                    time.sleep(poll_s)
                payload = Command(resume=True)
            else:
                payload = None


def _trace(home: Path) -> None:
    """LangGraph tracing into the campaign's MLflow experiment (spec ``trace: true``)."""
    import mlflow
    import mlflow.langchain

    from evotrainer.tracking import Tracker, tracking_uri

    mlflow.set_tracking_uri(tracking_uri(home))
    mlflow.set_experiment(experiment_id=Tracker(home).experiment_id)
    mlflow.langchain.autolog(silent=True)


def stop_campaign(cid: str, home: Path) -> None:
    store = _store(home)
    store.get_campaign(cid)
    store.set_campaign(cid, status="stopped")
    store.log_event(cid, "stop", {"by": "user"})


def rollback(cid: str, version: str, home: Path) -> None:
    """Return the mainline to an earlier policy version (and its harness)."""
    from evotrainer.agent.graph import compile_graph

    store = _store(home)
    camp = store.get_campaign(cid)
    lineage = {pv.id: pv for pv in store.policy_lineage(cid)}
    if version not in lineage:
        raise ConfigError(f"campaign {cid} has no policy version '{version}'; versions: {', '.join(lineage) or 'none'}")
    if camp.status == "running":
        raise ConfigError(f"campaign {cid} is running; stop it first (evotrainer campaign stop {cid})")
    pv = lineage[version]
    graph = compile_graph(home)
    config = {"configurable": {"thread_id": camp.thread_id}}
    graph.update_state(config, {"mainline": pv.id, "harness_version": pv.harness_version,
                                "rounds_without_promotion": 0, "best_accuracy": pv.eval_accuracy})
    store.set_campaign(cid, mainline_version=pv.id, status="stopped" if camp.status == "finished" else camp.status)
    store.log_event(cid, "rollback", {"to": pv.id, "harness_version": pv.harness_version})
