"""Rows to entities: the one place ORM rows become the pydantic entities callers see (no row leaves the store)."""

from __future__ import annotations

from sqlalchemy.orm import object_session

from evotrainer.core.domain import (
    BacktestStats,
    BranchResult,
    Campaign,
    Decision,
    HarnessVersion,
    Hypothesis,
    LedgerEntry,
    PolicyVersion,
    Proposal,
    Review,
)
from evotrainer.store.base import _UNSET
from evotrainer.store.entities import Backtest, Event, IndexedSkill
from evotrainer.store.models import (
    BacktestRow,
    BranchRow,
    CampaignRow,
    DecisionRow,
    EventRow,
    HarnessVersionRow,
    LeaseRow,
    LedgerRow,
    PolicyVersionRow,
    ProposalRow,
    ReviewRow,
    SkillRow,
)
from evotrainer.store.ownership import owner_of, shown_status


def _campaign(r: CampaignRow, lease: LeaseRow | None = _UNSET) -> Campaign:
    """The campaign with its owner and the status a reader should see (``running`` needs a live owner)."""
    if lease is _UNSET:
        s = object_session(r)
        lease = s.get(LeaseRow, r.id) if s is not None else None
    owner = owner_of(lease) if lease is not None else None
    return Campaign(id=r.id, name=r.name, spec=r.spec, status=shown_status(r.status, owner),
                    mainline_version=r.mainline_version, thread_id=r.thread_id, mlflow_run_id=r.mlflow_run_id,
                    created=r.created, updated=r.updated, error=r.error, owner=owner)


def _harness(r: HarnessVersionRow) -> HarnessVersion:
    return HarnessVersion(version=r.version, parent=r.parent, spec=r.spec, diff=r.diff, created=r.created)


def _policy(r: PolicyVersionRow) -> PolicyVersion:
    return PolicyVersion(id=r.id, campaign_id=r.campaign_id, parent_id=r.parent_id, harness_version=r.harness_version,
                         checkpoint=r.checkpoint, run_name=r.run_name, mlflow_run_id=r.mlflow_run_id,
                         eval_accuracy=r.eval_accuracy, step=r.step, created=r.created,
                         selection_accuracy=r.selection_accuracy)


def _proposal(r: ProposalRow) -> Proposal:
    return Proposal(id=r.id, campaign_id=r.campaign_id, round=r.round, knob=r.knob, old=r.old, new=r.new,
                    hypothesis=Hypothesis(symptom=r.symptom, cause=r.cause, change=r.change,
                                          expected_effect=r.expected_effect),
                    rationale=r.rationale, cited_skills=list(r.cited_skills), brain=r.brain, status=r.status,
                    harness_version=r.harness_version, created=r.created)


def _review(r: ReviewRow) -> Review:
    return Review(proposal_id=r.proposal_id, verdict=r.verdict, reviewer=r.reviewer, comment=r.comment, at=r.at)


def _backtest(r: BacktestRow) -> Backtest:
    return Backtest(id=r.id, campaign_id=r.campaign_id, round=r.round, proposal_ids=list(r.proposal_ids),
                    seeds=list(r.seeds), branch_steps=r.branch_steps,
                    stats={k: BacktestStats.model_validate(v) for k, v in (r.stats or {}).items()}, created=r.created)


def _branch(r: BranchRow) -> BranchResult:
    return BranchResult(backtest_id=r.backtest_id, proposal_id=r.proposal_id, role=r.role, seed=r.seed,
                        run_name=r.run_name, status=r.status, error=r.error, eval_accuracy=r.eval_accuracy,
                        train_reward=r.train_reward, gate_passed=r.gate_passed, gate_reasons=list(r.gate_reasons),
                        steps=r.steps, step=r.step, looks=list(r.looks or []), selection_accuracy=r.selection_accuracy)


def _decision(r: DecisionRow) -> Decision:
    return Decision(proposal_id=r.proposal_id, outcome=r.outcome, reasons=list(r.reasons),
                    stats=BacktestStats.model_validate(r.stats) if r.stats is not None else None,
                    gate_reasons=list(r.gate_reasons), at=r.at)


def _ledger(r: LedgerRow) -> LedgerEntry:
    return LedgerEntry(campaign_id=r.campaign_id, key=r.key, kind=r.kind, run_name=r.run_name, steps=r.steps, at=r.at)


def _event(r: EventRow) -> Event:
    return Event(id=r.id, campaign_id=r.campaign_id, at=r.at, kind=r.kind, message=r.message)


def _skill(r: SkillRow) -> IndexedSkill:
    return IndexedSkill(library=r.library, slug=r.slug, kind=r.kind, status=r.status, name=r.name,
                        description=r.description, version=r.version, path=r.path, content_hash=r.content_hash,
                        symptoms=list(r.symptoms), knob=r.knob, available=r.available, body=r.body,
                        front_matter=r.front_matter, indexed=r.indexed, removed=r.removed)


def _keywords(r: SkillRow) -> str:
    """Searchable words beside the prose: symptom names and the knob path, split into words."""
    return " ".join([*(s.replace("_", " ") for s in r.symptoms), r.knob.replace(".", " ").replace("_", " ")])


