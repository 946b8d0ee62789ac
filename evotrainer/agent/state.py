"""The campaign graph's state and runtime context.

State is what the LangGraph checkpointer persists after every node: small, JSON-friendly, ids only —
the records themselves live in the state store. The context is the per-process runtime (store, home,
spec, brain, branch pool) handed to nodes through LangGraph's ``Runtime``; it is never checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypedDict

from evotrainer.config.campaign import CampaignSpec

if TYPE_CHECKING:  # the services' types, for readers and checkers; none is imported to run a node
    from evotrainer.agent.brains.base import Brain
    from evotrainer.agent.clock import NodeClock
    from evotrainer.core.domain import PolicyVersion
    from evotrainer.core.tracking import Tracker
    from evotrainer.jobs.launchers.base import Launcher
    from evotrainer.store import Store


def segment_id(campaign_id: str, rnd: int) -> str:
    """The policy version id of round ``rnd``'s mainline segment (what movement, regression and revision look up)."""
    return f"{campaign_id}:r{rnd:02d}:segment"


def segment_start(store: Store, seg: PolicyVersion) -> PolicyVersion | None:
    """The version segment ``seg`` started from, or None for a first segment. Its parent, unless that is one of the
    versions the segment saved on its way (``budget.final_checks``: same run, stored as a chain before its end), in
    which case the chain is walked up to the version before them."""
    parent = store.get_policy_version(seg.parent_id) if seg.parent_id else None
    while parent is not None and seg.run_name and parent.run_name == seg.run_name:
        parent = store.get_policy_version(parent.parent_id) if parent.parent_id else None
    return parent


class CampaignState(TypedDict, total=False):
    campaign_id: str
    round: int
    mainline: str  # policy version id
    harness_version: str
    segment_run: str | None
    proposal_ids: list[str]
    approved_ids: list[str]
    backtest_id: str | None
    promoted: str | None
    rounds_without_promotion: int  # rounds in a row with neither a promotion nor a new best mainline accuracy
    best_accuracy: float | None  # best mainline held-out accuracy so far
    stop_reason: str | None
    failed: bool  # the campaign could not train at all (its first segment failed): it ends 'failed', not 'finished'


@dataclass
class CampaignContext:
    """What every node of one campaign process shares (LangGraph's runtime context; never checkpointed)."""

    campaign_id: str  # the campaign's id in the store
    spec: CampaignSpec  # the validated spec it was started with
    home: Path  # the home its jobs, library copy and state live under
    store: Store  # the state store: campaigns, versions, findings, proposals, decisions, ledger, events
    brain: Brain  # who drafts proposals (the heuristic, or an LLM with the heuristic as its fallback)
    pool: Launcher  # where jobs and scoring run (evotrainer.jobs.launchers: local workers or Ray)
    tracker: Tracker  # MLflow: the campaign's parent run and its jobs' runs
    mlflow_run_id: str | None = None  # the campaign's own MLflow run (its jobs are nested under it)
    log: Callable[[str], None] = field(default=lambda _m: None)  # where progress lines go
    started_at: float = 0.0  # time.time() when this process took the campaign (the wall-clock cap counts from it)
    library: Path | None = None  # the skill library folder this campaign reads and curates
    clock: NodeClock | None = None  # times the nodes' waits on the worker (None: not timed)
    task: Any = None  # the campaign's Task (agent/arms.py::_task), built once per process
