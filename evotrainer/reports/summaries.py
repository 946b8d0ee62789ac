"""What the CLI and the review dashboard both read from the store, and the one write a person makes: a review.

Why a module of its own: ``evotrainer campaign status`` and the dashboard's campaign page show the same
summary, ``review approve`` and the dashboard's Approve button record the same review, and ``skills history``
and a skill's page list the same proposals. Each is written once, here, so the two front ends cannot drift
(a check added to a review applies to both). Everything takes a ``Store`` and returns plain data
(pydantic entities or JSON-ready dicts); printing and HTML are the callers' business.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from evotrainer.agent.clock import read_node_seconds, timings_path
from evotrainer.config.harness import HarnessSpec, diff
from evotrainer.core.domain import PolicyVersion, Review
from evotrainer.core.errors import ConfigError
from evotrainer.core.home import jobs_dir
from evotrainer.core.redact import mask
from evotrainer.core.runmeta import read_run_meta
from evotrainer.core.tracking import tracking_uri
from evotrainer.evidence.model import read_metrics
from evotrainer.store import Store

if TYPE_CHECKING:
    import pandas as pd

Verdict = Literal["approve", "reject"]
AFTER_REVIEW = "the campaign continues (at once if it is waiting, else on resume)"


def record_review(store: Store, pid: str, verdict: Verdict, comment: str, reviewer: str) -> Review:
    """Record a person's review of proposal ``pid``; a campaign waiting on it continues at its next poll.

    Refused (``ConfigError``) when the proposal is not pending review, or a rejection comes without a reason.
    """
    p = store.get_proposal(pid)
    if p.status != "pending_review":
        raise ConfigError(f"proposal {pid} is {p.status}, not waiting for review")
    if verdict == "reject" and not comment.strip():
        raise ConfigError(f"rejecting {pid} needs a comment saying why (it is recorded with the review)")
    if not reviewer.strip():
        raise ConfigError("a review needs a reviewer name")
    return store.add_review(Review(proposal_id=pid, verdict=verdict, reviewer=reviewer.strip(), comment=comment,
                                   at=datetime.now(timezone.utc)))


def start_accuracy(home: Path, lineage: list[PolicyVersion],
                   read: Callable[[Path], pd.DataFrame] | None = None) -> float | None:
    """Held-out accuracy before the campaign trained: the first segment's step-0 evaluation if it has one,
    else the first policy version's. ``read`` reads a job's metrics (default ``evidence.read_metrics``)."""

    accs = [pv.eval_accuracy for pv in lineage if pv.eval_accuracy is not None]
    start = accs[0] if accs else None
    if lineage and lineage[0].run_name:  # the first segment evaluates its starting policy at step 0
        m = (read or read_metrics)(home / "jobs" / lineage[0].run_name)
        if "eval/greedy_accuracy" in m and m["eval/greedy_accuracy"].notna().any():
            start = float(m["eval/greedy_accuracy"].dropna().iloc[0])
    return start


def mainline_accuracy(camp: Any, lineage: list[PolicyVersion]) -> float | None:
    """Held-out accuracy of the mainline the campaign hands over (after a rollback, not the last version trained)."""
    return next((pv.eval_accuracy for pv in lineage if pv.id == camp.mainline_version), None)


def campaign_summary(home: Path, cid: str, store: Store | None = None,
                     read: Callable[[Path], pd.DataFrame] | None = None) -> dict[str, Any]:
    """Status (``running`` only with a live owner, else e.g. ``interrupted``) and the command that resumes it,
    budget, held-out accuracy start → end, lineage, proposals, decisions, harness versions, where to look."""


    store = store or Store.for_home(home)
    camp = store.get_campaign(cid)
    lineage = store.policy_lineage(cid)
    decisions = store.list_decisions(cid)
    props = {p.id: p for p in store.list_proposals(cid)}
    return {
        "campaign": camp.model_dump(mode="json"),
        "resume": resume_command(home, camp),
        "budget": {"spent": store.ledger_total(cid), "total": camp.spec["budget"]["total_steps"]},
        "accuracy": {"start": start_accuracy(home, lineage, read), "end": mainline_accuracy(camp, lineage)},
        "lineage": [pv.model_dump(mode="json") for pv in lineage],
        "proposals": [p.model_dump(mode="json") for p in props.values()],
        "decisions": [{**d.model_dump(mode="json"), "knob": props[d.proposal_id].knob, "old": props[d.proposal_id].old,
                       "new": props[d.proposal_id].new} for d in decisions if d.proposal_id in props],
        "promoted": [d.proposal_id for d in decisions if d.outcome == "promote"],
        "versions": harness_versions(store, lineage),
        "revisions": [e.message for e in store.events(cid, kind="diagnostic_revision")],
        "confirmation": next((e.message for e in reversed(store.events(cid, kind="confirmation"))), None),
        "rollbacks": [{**e.message, "auto": e.kind == "regression_rollback"} for e in store.events(cid)
                      if e.kind in ("rollback", "regression_rollback")],
        "spend": spend(store, cid, camp, lineage, decisions),
        "seconds": job_seconds(home, store, cid),
        "process_seconds": read_node_seconds(timings_path(home, cid)),
        "kept": [e.message for e in store.events(cid, kind="kept_branch")],
        "explore_modes": [e.message for e in store.events(cid, kind="explore_mode")],
        "movements": [e.message for e in store.events(cid, kind="movement")],
        "where": {"mlflow": mask(tracking_uri(home)), "state": mask(store.url),
                  "mlflow_run_id": camp.mlflow_run_id},
    }


def spend(store: Store, cid: str, camp: Any, lineage: list[PolicyVersion], decisions: list[Any]) -> dict[str, Any]:
    """Where the budget went: steps in the mainline handed over (its segments and the kept branches it continued
    from), steps of branches it did not keep, and changes screened out for free; the useful share is the
    mainline's own steps over the steps spent. A version averaged from k seeds (``kept_branch`` event's
    ``merged``) holds what all k trained, so its steps count k times."""
    spent = store.ledger_total(cid)
    by_id = {pv.id: pv for pv in lineage}
    branch_runs = {e.run_name for e in store.ledger(cid) if e.kind == "branch"}
    merged = {m["run"]: len(m.get("from") or ()) for e in store.events(cid, kind="kept_branch")
              if isinstance(m := e.message.get("merged"), dict) and m.get("kept")}
    segment = kept = 0
    cur = by_id.get(camp.mainline_version)
    while cur is not None:
        parent = by_id.get(cur.parent_id) if cur.parent_id else None
        steps = cur.step - (parent.step if parent is not None else 0)
        if cur.run_name in merged:
            kept += steps * merged[cur.run_name]
        elif cur.run_name in branch_runs:
            kept += steps
        else:
            segment += steps
        cur = parent
    useful = segment + kept
    return {"spent": spent, "mainline_segments": segment, "kept_branches": kept,
            "discarded": max(0, spent - useful), "useful_share": round(useful / spent, 4) if spent else None,
            "screened": sum(1 for d in decisions if d.outcome == "screened")}


def job_seconds(home: Path, store: Store, cid: str) -> dict[str, Any]:
    """Where the campaign's jobs spent their seconds, summed over every session of every job it ran (from each
    job's ``meta.json`` timings): the trainer (its steps, checkpoints and callbacks), held-out evaluations,
    setup (loading the policy and the trainer), building a warm-started base policy when no cached one existed
    (``warm_start``: a one-off cost of the policy, not of the campaign), and the rest inside the job process (the
    last records, MLflow).
    What a campaign spends outside its jobs (starting workers, confirmations, diagnosis, the brain) is its wall
    time minus ``jobs``. A session killed before it finished records nothing (``untimed_jobs`` counts jobs with
    no session at all)."""

    out = {"trainer": 0.0, "eval": 0.0, "setup": 0.0, "warm_start": 0.0, "other": 0.0, "jobs": 0.0, "sessions": 0,
           "untimed_jobs": 0}
    for run in sorted({e.run_name for e in store.ledger(cid)}):
        meta = read_run_meta(jobs_dir(home) / run)
        if meta is None or not meta.timings:
            out["untimed_jobs"] += 1
            continue
        for t in meta.timings:
            out["trainer"] += t.train_s - t.eval_s
            out["eval"] += t.eval_s
            out["setup"] += t.setup_s
            out["warm_start"] += t.warm_start_s
            out["other"] += max(0.0, t.wall_s - t.warm_start_s - t.setup_s - t.train_s)
            out["jobs"] += t.wall_s
            out["sessions"] += 1
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def resume_command(home: Path, camp: Any) -> str | None:
    """The command that continues ``camp``, or None while a live owner runs it or once it ended (finished or failed)."""
    if camp.status in ("finished", "failed") or (camp.owner is not None and camp.owner.live):
        return None
    return f"evotrainer campaign resume {camp.id} --home {home}"


def harness_versions(store: Store, lineage: list[PolicyVersion]) -> list[dict[str, Any]]:
    """Mainline harness versions in order, each with its diff from the previous one (a round may add two)."""

    out: list[dict[str, Any]] = []
    prev = None
    for pv in lineage:
        if prev is not None and pv.harness_version == prev:
            continue
        changes = [] if prev is None else [c.model_dump(mode="json") for c in diff(
            HarnessSpec.model_validate(store.get_harness_version(prev).spec),
            HarnessSpec.model_validate(store.get_harness_version(pv.harness_version).spec))]
        out.append({"version": pv.harness_version, "policy": pv.id, "diff": changes})
        prev = pv.harness_version
    return out


def skill_history(store: Store, slug: str) -> list[dict[str, Any]]:
    """Proposals (across campaigns, oldest first) that cited ``slug``, with their decision and held-out effect."""
    props = store.list_proposals(cites=slug)
    decisions = store.get_decisions([p.id for p in props])
    rows = []
    for p in props:
        d = decisions.get(p.id)
        st = d.stats if d is not None else None
        rows.append({"campaign": p.campaign_id, "round": p.round, "proposal": p.id, "knob": p.knob,
                     "old": p.old, "new": p.new, "symptom": p.hypothesis.symptom, "brain": p.brain,
                     "status": p.status, "outcome": d.outcome if d is not None else None,
                     "effect": st.effect if st else None, "ci_low": st.ci_low if st else None,
                     "ci_high": st.ci_high if st else None, "created": p.created.isoformat()})
    return rows


__all__ = ["record_review", "campaign_summary", "harness_versions", "start_accuracy", "skill_history",
           "resume_command", "spend", "AFTER_REVIEW"]
