"""Proposals, their reviews, backtests and branches, and decisions. Part of ``Store`` (a mixin)."""

from __future__ import annotations

import json

from sqlalchemy import Text, cast, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evotrainer.core.domain import (
    BacktestStats,
    BranchResult,
    Decision,
    Proposal,
    ProposalStatus,
    Review,
)
from evotrainer.store.base import NotFound, StoreBase, StoreError, _check
from evotrainer.store.entities import Backtest
from evotrainer.store.models import (
    BacktestRow,
    BranchRow,
    DecisionRow,
    ProposalRow,
    ReviewRow,
    utcnow,
)
from evotrainer.store.rows import (
    _backtest,
    _branch,
    _decision,
    _proposal,
    _review,
)


class ProposalsMixin(StoreBase):
    # ------------------------------------------------------------------------------------------ proposals
    def add_proposal(self, p: Proposal) -> Proposal:
        """Record a proposal (idempotent by id: a second call returns the stored one unchanged)."""
        def make(s: Session) -> ProposalRow:
            self._campaign_row(s, p.campaign_id)
            d = p.model_dump(mode="json", exclude={"hypothesis", "created"})
            return ProposalRow(**d, **p.hypothesis.model_dump(), created=p.created)

        return self._once(lambda s: s.get(ProposalRow, p.id), make, _proposal)

    def get_proposal(self, id: str) -> Proposal:
        with self._read() as s:
            return _proposal(self._get(s, ProposalRow, id, "proposal"))

    def list_proposals(self, campaign_id: str | None = None, status: ProposalStatus | None = None,
                       round: int | None = None, *, cites: str | None = None, limit: int | None = None,
                       offset: int = 0) -> list[Proposal]:
        """Proposals matching every filter given, oldest first; ``limit``/``offset`` page through them.

        ``cites``: only proposals whose ``cited_skills`` holds that slug (the database narrows by the JSON
        text, the exact list membership is checked here; paging applies before that check only when no
        ``cites`` is given).
        """
        with self._read() as s:
            q = self._proposal_query(s, campaign_id, status, round)
            q = q.order_by(ProposalRow.created, ProposalRow.id)
            if cites is not None:
                needle = json.dumps(cites).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                q = q.where(cast(ProposalRow.cited_skills, Text).like(f"%{needle}%", escape="\\"))
                found = [p for p in map(_proposal, s.scalars(q)) if cites in p.cited_skills]
                return found[offset:None if limit is None else offset + limit]
            if limit is not None:
                q = q.limit(limit)
            return [_proposal(r) for r in s.scalars(q.offset(offset))]

    def count_proposals(self, campaign_id: str | None = None, status: ProposalStatus | None = None,
                        round: int | None = None) -> int:
        """How many proposals ``list_proposals`` would return with the same filters (for paging)."""
        with self._read() as s:
            q = self._proposal_query(s, campaign_id, status, round)
            return int(s.scalar(select(func.count()).select_from(q.subquery())) or 0)

    def proposal_counts(self) -> dict[str, dict[str, int]]:
        """Campaign id -> proposal status -> count, for every campaign that has proposals (one query)."""
        out: dict[str, dict[str, int]] = {}
        with self._read() as s:
            q = select(ProposalRow.campaign_id, ProposalRow.status, func.count()).group_by(
                ProposalRow.campaign_id, ProposalRow.status)
            for cid, status, n in s.execute(q):
                out.setdefault(cid, {})[status] = int(n)
        return out

    def _proposal_query(self, s: Session, campaign_id: str | None, status: ProposalStatus | None, round: int | None):
        q = select(ProposalRow)
        if campaign_id is not None:
            self._campaign_row(s, campaign_id)
            q = q.where(ProposalRow.campaign_id == campaign_id)
        if status is not None:
            q = q.where(ProposalRow.status == _check(status, ProposalStatus, "proposal status"))
        if round is not None:
            q = q.where(ProposalRow.round == round)
        return q

    def set_proposal_status(self, id: str, status: ProposalStatus) -> Proposal:
        _check(status, ProposalStatus, "proposal status")
        with self._write() as s:
            r = self._get(s, ProposalRow, id, "proposal")
            r.status = status
            s.flush()
            return _proposal(r)

    def pending_reviews(self, *, limit: int | None = None, offset: int = 0) -> list[Proposal]:
        """Proposals waiting for a person, across campaigns, oldest first."""
        return self.list_proposals(status="pending_review", limit=limit, offset=offset)

    # ------------------------------------------------------------------------------------------ reviews
    def add_review(self, review: Review) -> Review:
        """Record the one review of a proposal and move it to approved/rejected in the same transaction.

        A second review with the same verdict returns the first; a different verdict raises ``StoreError``.
        Only a proposal that is pending review (or already in the status the verdict leads to) can be reviewed.
        """
        target = "approved" if review.verdict == "approve" else "rejected"
        try:
            with self._write() as s:
                p = self._get(s, ProposalRow, review.proposal_id, "proposal")
                existing = s.get(ReviewRow, review.proposal_id)
                if existing is not None:
                    return self._same_review(existing, review)
                if p.status not in ("pending_review", target):
                    raise StoreError(f"proposal '{p.id}' is {p.status}; only a proposal pending review can be "
                                     f"reviewed (asked to {review.verdict} it)")
                row = ReviewRow(**review.model_dump())
                s.add(row)
                p.status = target
                s.flush()
                return _review(row)
        except IntegrityError:
            with self._read() as s:
                existing = s.get(ReviewRow, review.proposal_id)
                if existing is None:
                    raise
                return self._same_review(existing, review)

    @staticmethod
    def _same_review(existing: ReviewRow, review: Review) -> Review:
        if existing.verdict != review.verdict:
            raise StoreError(
                f"proposal '{existing.proposal_id}' was already reviewed: {existing.verdict} by {existing.reviewer} "
                f"at {existing.at:%Y-%m-%d %H:%M:%S} UTC; refusing {review.verdict} by {review.reviewer}")
        return _review(existing)

    def get_review(self, proposal_id: str) -> Review | None:
        with self._read() as s:
            self._get(s, ProposalRow, proposal_id, "proposal")
            r = s.get(ReviewRow, proposal_id)
            return _review(r) if r is not None else None

    def get_reviews(self, proposal_ids: list[str]) -> dict[str, Review]:
        """Proposal id -> its review, for those of ``proposal_ids`` that have one (one query, unknown ids skipped)."""
        with self._read() as s:
            q = select(ReviewRow).where(ReviewRow.proposal_id.in_(list(proposal_ids)))
            return {r.proposal_id: _review(r) for r in s.scalars(q)}

    # ------------------------------------------------------------------------------------------ backtests
    def add_backtest(self, id: str, campaign_id: str, round: int, proposal_ids: list[str], seeds: list[int],
                     branch_steps: int) -> Backtest:
        """Record a backtest before its branches run (idempotent by id)."""
        def make(s: Session) -> BacktestRow:
            self._campaign_row(s, campaign_id)
            for pid in proposal_ids:
                self._get(s, ProposalRow, pid, "proposal")
            return BacktestRow(id=id, campaign_id=campaign_id, round=round, proposal_ids=list(proposal_ids),
                               seeds=[int(x) for x in seeds], branch_steps=branch_steps, stats={}, created=utcnow())

        return self._once(lambda s: s.get(BacktestRow, id), make, _backtest)

    def get_backtest(self, id: str) -> Backtest:
        with self._read() as s:
            return _backtest(self._get(s, BacktestRow, id, "backtest"))

    def list_backtests(self, campaign_id: str) -> list[Backtest]:
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(BacktestRow).where(BacktestRow.campaign_id == campaign_id)
            return [_backtest(r) for r in s.scalars(q.order_by(BacktestRow.created, BacktestRow.id))]

    def add_branch(self, b: BranchResult) -> BranchResult:
        """Record a finished or failed branch (idempotent by backtest, proposal, role and seed)."""
        slot = b.proposal_id or ""

        def find(s: Session) -> BranchRow | None:
            return s.scalar(select(BranchRow).where(
                BranchRow.backtest_id == b.backtest_id, BranchRow.proposal_key == slot,
                BranchRow.role == b.role, BranchRow.seed == b.seed))

        def make(s: Session) -> BranchRow:
            self._get(s, BacktestRow, b.backtest_id, "backtest")
            if b.proposal_id is not None:
                self._get(s, ProposalRow, b.proposal_id, "proposal")
            return BranchRow(**b.model_dump(), proposal_key=slot)

        return self._once(find, make, _branch)

    def set_branch_selection(self, backtest_id: str, proposal_id: str | None, role: str, seed: int,
                             accuracy: float) -> BranchResult:
        """Record a recorded branch's accuracy on the selection split (measured when its arm was adopted)."""
        with self._write() as s:
            r = s.scalar(select(BranchRow).where(
                BranchRow.backtest_id == backtest_id, BranchRow.proposal_key == (proposal_id or ""),
                BranchRow.role == role, BranchRow.seed == seed))
            if r is None:
                raise NotFound(f"backtest '{backtest_id}' has no {role} branch of seed {seed}"
                               f"{'' if proposal_id is None else ' for ' + proposal_id}")
            r.selection_accuracy = float(accuracy)
            s.flush()
            return _branch(r)

    def list_branches(self, backtest_id: str) -> list[BranchResult]:
        with self._read() as s:
            self._get(s, BacktestRow, backtest_id, "backtest")
            q = select(BranchRow).where(BranchRow.backtest_id == backtest_id).order_by(BranchRow.id)
            return [_branch(r) for r in s.scalars(q)]

    def campaign_branches(self, campaign_id: str) -> list[BranchResult]:
        """Every branch of every backtest of a campaign, in the order they were recorded (one query)."""
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = (select(BranchRow).join(BacktestRow, BacktestRow.id == BranchRow.backtest_id)
                 .where(BacktestRow.campaign_id == campaign_id).order_by(BranchRow.id))
            return [_branch(r) for r in s.scalars(q)]

    def set_backtest_stats(self, backtest_id: str, proposal_id: str, stats: BacktestStats) -> Backtest:
        """Set (or replace) the paired statistics of one proposal in a backtest."""
        with self._write() as s:
            r = self._get(s, BacktestRow, backtest_id, "backtest")
            if proposal_id not in r.proposal_ids:
                raise StoreError(f"proposal '{proposal_id}' is not part of backtest '{backtest_id}'; "
                                 f"it tests: {', '.join(r.proposal_ids) or '(none)'}")
            r.stats = {**(r.stats or {}), proposal_id: stats.model_dump(mode="json")}  # new dict: JSON is not tracked
            s.flush()
            return _backtest(r)

    # ------------------------------------------------------------------------------------------ decisions
    def add_decision(self, d: Decision) -> Decision:
        """Record the decision on a proposal (one per proposal; a second call returns the first)."""
        def make(s: Session) -> DecisionRow:
            self._get(s, ProposalRow, d.proposal_id, "proposal")
            return DecisionRow(**d.model_dump(mode="json", exclude={"at"}), at=d.at)

        return self._once(lambda s: s.get(DecisionRow, d.proposal_id), make, _decision)

    def get_decision(self, proposal_id: str) -> Decision | None:
        with self._read() as s:
            self._get(s, ProposalRow, proposal_id, "proposal")
            r = s.get(DecisionRow, proposal_id)
            return _decision(r) if r is not None else None

    def get_decisions(self, proposal_ids: list[str]) -> dict[str, Decision]:
        """Proposal id -> its decision, for those of ``proposal_ids`` that have one (one query, unknown ids skipped)."""
        with self._read() as s:
            q = select(DecisionRow).where(DecisionRow.proposal_id.in_(list(proposal_ids)))
            return {r.proposal_id: _decision(r) for r in s.scalars(q)}

    def list_decisions(self, campaign_id: str) -> list[Decision]:
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = (select(DecisionRow).join(ProposalRow, ProposalRow.id == DecisionRow.proposal_id)
                 .where(ProposalRow.campaign_id == campaign_id).order_by(DecisionRow.at, DecisionRow.proposal_id))
            return [_decision(r) for r in s.scalars(q)]
