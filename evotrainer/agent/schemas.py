"""The nouns of a campaign as pydantic models: what nodes pass around, what the store keeps, what brains return.

These are the boundary types: the store converts its ORM rows to them (rows never leak out), the graph
state holds their ids, brains return ``ProposalDraft`` (an LLM's output is parsed into it and nothing else),
and the CLI and UI print them. Every status is a closed ``Literal`` so a typo is an error, not a new state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ProposalStatus = Literal[
    "pending_review", "approved", "rejected", "backtesting", "promoted", "refuted", "inconclusive", "blocked", "failed",
    "skipped_budget",
]
Outcome = Literal["promote", "reject", "inconclusive", "blocked", "failed"]
CampaignStatus = Literal["created", "running", "waiting_review", "stopped", "finished", "failed"]
BranchRole = Literal["control", "treatment"]
BranchStatus = Literal["finished", "failed"]
LedgerKind = Literal["segment", "branch"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hypothesis(_Model):
    """Symptom → cause → change → expected effect: why this one change should help."""

    symptom: str = Field(..., description="A symptom from the diagnostics vocabulary (what was observed).")
    cause: str = Field(..., min_length=3, max_length=600, description="Why the symptom happens.")
    change: str = Field(..., min_length=3, max_length=300, description="The one change, in words.")
    expected_effect: str = Field(..., min_length=3, max_length=600, description="What should improve, and by how much.")


class ProposalDraft(_Model):
    """What a brain proposes: exactly one knob of the harness, a new value, and the reasoning."""

    knob: str = Field(..., description="Dotted harness knob path, e.g. grpo.epsilon_high.")
    value: Any = Field(..., description="New value; validated against the harness bounds before it is accepted.")
    hypothesis: Hypothesis
    rationale: str = Field("", max_length=2000, description="Free-text reasoning (shown to reviewers).")
    cited_skills: list[str] = Field(default_factory=list, description="Slugs of library skills/mistakes used.")
    prior: float | None = Field(None, description="Brain's expected effect (held-out accuracy points), if any.")


class Proposal(_Model):
    id: str
    campaign_id: str
    round: int
    knob: str
    old: Any
    new: Any
    hypothesis: Hypothesis
    rationale: str
    cited_skills: list[str]
    brain: str
    status: ProposalStatus
    harness_version: str
    created: datetime


class Review(_Model):
    proposal_id: str
    verdict: Literal["approve", "reject"]
    reviewer: str
    comment: str
    at: datetime


class BranchResult(_Model):
    """One branch of a backtest: control or treatment, one seed, forked from the same checkpoint."""

    backtest_id: str
    proposal_id: str | None
    role: BranchRole
    seed: int
    run_name: str | None
    status: BranchStatus
    error: str | None = None
    eval_accuracy: float | None = None
    train_reward: float | None = None
    gate_passed: bool | None = None
    gate_reasons: list[str] = Field(default_factory=list)
    steps: int = 0


class BacktestStats(_Model):
    """Paired effect of treatment over control on held-out accuracy, with a confidence interval."""

    n_pairs: int
    effect: float
    ci_low: float
    ci_high: float
    confidence: float
    method: str
    control_mean: float
    treatment_mean: float


class Decision(_Model):
    proposal_id: str
    outcome: Outcome
    reasons: list[str]
    stats: BacktestStats | None = None
    gate_reasons: list[str] = Field(default_factory=list)
    at: datetime


class PolicyVersion(_Model):
    id: str
    campaign_id: str
    parent_id: str | None
    harness_version: str
    checkpoint: str
    run_name: str | None
    mlflow_run_id: str | None
    eval_accuracy: float | None
    step: int
    created: datetime


class HarnessVersion(_Model):
    version: str
    parent: str | None
    spec: dict[str, Any]
    diff: list[dict[str, Any]]
    created: datetime


class LedgerEntry(_Model):
    campaign_id: str
    key: str
    kind: LedgerKind
    run_name: str | None
    steps: int
    at: datetime


class Campaign(_Model):
    id: str
    name: str
    spec: dict[str, Any]
    status: CampaignStatus
    mainline_version: str | None
    thread_id: str
    mlflow_run_id: str | None
    created: datetime
    updated: datetime
    error: str | None = None
