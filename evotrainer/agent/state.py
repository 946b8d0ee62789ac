"""The campaign graph's state and runtime context.

State is what the LangGraph checkpointer persists after every node: small, JSON-friendly, ids only —
the records themselves live in the state store. The context is the per-process runtime (store, home,
spec, brain, branch pool) handed to nodes through LangGraph's ``Runtime``; it is never checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

from evotrainer.config.campaign import CampaignSpec


def segment_id(campaign_id: str, rnd: int) -> str:
    """The policy version id of round ``rnd``'s mainline segment (what movement, regression and revision look up)."""
    return f"{campaign_id}:r{rnd:02d}:segment"


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
    bonus_steps: int  # steps the last backtest freed by stopping early: the next segment trains them
    hold_steps: int | None  # set when a round held exploration (the mainline still improving): its segment's steps
    stop_reason: str | None


@dataclass
class CampaignContext:
    campaign_id: str
    spec: CampaignSpec
    home: Path
    store: Any  # evotrainer.store.Store
    brain: Any  # Brain
    pool: Any  # a Launcher (evotrainer.jobs.launchers): where jobs and scoring run
    tracker: Any  # evotrainer.core.tracking.Tracker
    mlflow_run_id: str | None = None
    log: Callable[[str], None] = field(default=lambda _m: None)
    started_at: float = 0.0
    library: Path | None = None  # the skill library folder this campaign reads and curates
    clock: Any = None  # an agent.clock.NodeClock: times the nodes' waits on the worker (None: not timed)
    task_inert: dict[str, str] | None = None  # the task's inert knobs (agent/arms.py::_task_inert), once built
