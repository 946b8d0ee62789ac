"""The domain's nouns as pydantic models, at the bottom of the package: what nodes pass around, what the store
keeps, what brains return, what diagnostics find and what the library files are.

Why one low module (issue 16): the store, the statistics and the library used to import these from ``agent/``,
``diagnostics/`` and ``library/`` — layers above them — so the store could not be read without the agent package.
Here they depend on pydantic and the symptom registry only.

These are the boundary types: the store converts its ORM rows to them (rows never leak out), the graph
state holds their ids, brains return ``ProposalDraft`` (an LLM's output is parsed into it and nothing else),
and the CLI and UI print them. Every status is a closed ``Literal`` so a typo is an error, not a new state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evotrainer.core.symptoms import check_symptom

ProposalStatus = Literal[
    "pending_review", "approved", "rejected", "backtesting", "promoted", "refuted", "inconclusive", "blocked", "failed",
    "skipped_budget", "screened",
]
# 'screened': not backtested, because re-scoring the last segment's rollouts predicted no effect on the training
# signal (evotrainer.stats.screening)
Outcome = Literal["promote", "reject", "inconclusive", "blocked", "failed", "screened"]
CampaignStatus = Literal["created", "running", "waiting_review", "stopped", "finished", "failed"]
# What a campaign *is*, as every reader sees it: the stored status, except that "running" (or "created") without
# a live owner is "interrupted" — the owner died (kill -9, the OOM killer, a reboot) and nothing runs it now.
ShownCampaignStatus = Literal["created", "running", "waiting_review", "stopped", "finished", "failed", "interrupted"]
BranchRole = Literal["control", "treatment"]
BranchStatus = Literal["finished", "failed"]
LedgerKind = Literal["segment", "branch"]
SkillKind = Literal["skill", "mistake"]
SkillStatus = Literal["active", "deprecated"]


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
    step: int | None = Field(None, description="Global step of the branch's last look (the checkpoint its "
                                                "eval_accuracy and selection_accuracy belong to).")
    looks: list[dict[str, Any]] = Field(default_factory=list, description="Per look: step, eval_accuracy, train_reward.")
    selection_accuracy: float | None = Field(None, description="Greedy accuracy on the selection split at its last "
                                                               "look (set for the branches the mainline may continue from).")


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
    look: int = Field(1, description="The look (1-based) the decision was taken at.")
    looks: int = Field(1, description="Looks planned (evaluations of every branch at evenly spaced steps).")
    step: int | None = Field(None, description="Branch steps trained at that look.")
    se: float | None = Field(None, description="Standard error of the effect.")
    df: float | None = Field(None, description="Degrees of freedom of the t interval.")
    rule: Literal["superiority", "non_inferiority", "larger_step", "estimate"] = Field(
        "superiority", description="What a promotion needed: the interval above min_effect (superiority); or, where "
                                   "the budget ended the backtest, an effect above the control's (estimate; "
                                   "backtest.spent_estimate). non_inferiority and larger_step are read from decisions "
                                   "recorded before those stuck-round rules were removed (issue 59's ablation); "
                                   "nothing decides by them now.")


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
    selection_accuracy: float | None = Field(None, description="Greedy accuracy on the selection split (which version "
                                                               "the mainline continues from or rolls back to).")


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


class CampaignOwner(_Model):
    """The process that holds a campaign's lease: only it may run the campaign's graph and jobs."""

    host: str = Field(..., description="Host name of the owner process.")
    pid: int = Field(..., description="Process id of the owner on that host.")
    started: float = Field(..., description="The owner process's start time (seconds since the epoch): with the pid, "
                                            "it tells the owner apart from a later process that reused the pid.")
    purpose: str = Field(..., description="What the owner is doing: start, resume or rollback.")
    acquired: datetime = Field(..., description="When the lease was taken.")
    heartbeat: datetime = Field(..., description="Last heartbeat (renewed every few seconds while the owner lives).")
    live: bool = Field(..., description="Same host: the process with this pid and start time still runs. Another "
                                        "host: the heartbeat is recent. A lease that is not live can be taken over.")


class Campaign(_Model):
    id: str
    name: str
    spec: dict[str, Any]
    status: ShownCampaignStatus = Field(..., description="The stored status, or 'interrupted' when it says running "
                                                          "(or created) but no live owner holds the lease.")
    mainline_version: str | None
    thread_id: str
    mlflow_run_id: str | None
    created: datetime
    updated: datetime
    error: str | None = None
    owner: CampaignOwner | None = Field(None, description="The lease's holder (live or not), or None if nobody holds it.")


Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


class Example(BaseModel):
    """One rollout shown as evidence (text truncated; it is untrusted data)."""

    rollout_id: str
    step: int | None = None
    prompt: str = ""
    completion: str = ""
    reward: float | None = None
    correct: bool | None = None


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    symptom: str
    diagnostic: str
    version: str
    severity: Severity
    confidence: float = Field(ge=0.0, le=1.0)
    steps: tuple[int, int] | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)
    explanation: str

    @field_validator("symptom")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_symptom(v)


class Candidate(BaseModel):
    """One intervention a brain may propose: a knob change with the evidence recorded for it so far."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="Catalog id or skill slug.")
    symptoms: list[str] = Field(..., description="Symptoms it addresses.")
    weights: dict[str, float] = Field(
        default_factory=dict, description="How directly it answers each symptom (its skill's trigger weight: 1 = the "
                                          "remedy its source proposes; lower = generic or secondary); 1 when absent.")
    knob: str
    value: Any = Field(..., description="Value to set (already resolved against the current harness).")
    description: str
    source: str = ""
    effects: list[float] = Field(default_factory=list, description="Recorded held-out effects (points/100) of past backtests.")
    mistake: bool = Field(False, description="Known mistake: only proposable with new evidence.")
