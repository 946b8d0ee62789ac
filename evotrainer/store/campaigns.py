"""Campaigns, their harness and policy versions, findings, the step ledger and the event log. Part of ``Store`` (a mixin)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evotrainer.core.domain import (
    Campaign,
    CampaignStatus,
    Finding,
    HarnessVersion,
    LedgerEntry,
    PolicyVersion,
)
from evotrainer.core.names import check_name
from evotrainer.store.base import _UNSET, StoreBase, StoreError, _check
from evotrainer.store.entities import Event
from evotrainer.store.models import (
    CampaignRow,
    EventRow,
    FindingRow,
    HarnessVersionRow,
    LeaseRow,
    LedgerRow,
    PolicyVersionRow,
    utcnow,
)
from evotrainer.store.rows import (
    _campaign,
    _event,
    _harness,
    _ledger,
    _policy,
)


class CampaignsMixin(StoreBase):
    # ------------------------------------------------------------------------------------------ campaigns
    def create_campaign(self, id: str, name: str, spec: dict[str, Any], thread_id: str) -> Campaign:
        """Create campaign ``id`` in status ``created``; if it exists already, return it unchanged."""
        check_name(id, "campaign id")  # it names HOME/campaigns/<id>: letters, digits, -_. only

        def make(s: Session) -> CampaignRow:
            now = utcnow()
            return CampaignRow(id=id, name=name, spec=spec, status="created", mainline_version=None,
                               thread_id=thread_id, mlflow_run_id=None, error=None, created=now, updated=now)

        return self._once(lambda s: s.get(CampaignRow, id), make, _campaign)

    def get_campaign(self, id: str) -> Campaign:
        with self._read() as s:
            return _campaign(self._campaign_row(s, id))

    def list_campaigns(self) -> list[Campaign]:
        with self._read() as s:
            leases = {r.campaign_id: r for r in s.scalars(select(LeaseRow))}
            return [_campaign(r, leases.get(r.id))
                    for r in s.scalars(select(CampaignRow).order_by(CampaignRow.created, CampaignRow.id))]

    def set_campaign(self, id: str, *, status: CampaignStatus = _UNSET, mainline_version: str | None = _UNSET,
                     mlflow_run_id: str | None = _UNSET, error: str | None = _UNSET) -> Campaign:
        """Change the given fields (pass ``None`` to clear one) and bump ``updated``.

        ``status`` is the stored status (``CampaignStatus``); 'interrupted' is never stored, it is how a reader
        sees 'running' without a live owner.
        """
        with self._write() as s:
            r = self._campaign_row(s, id)
            if status is not _UNSET:
                r.status = _check(status, CampaignStatus, "campaign status")
            if mainline_version is not _UNSET:
                r.mainline_version = mainline_version
            if mlflow_run_id is not _UNSET:
                r.mlflow_run_id = mlflow_run_id
            if error is not _UNSET:
                r.error = error
            r.updated = utcnow()
            s.flush()
            return _campaign(r)

    # ------------------------------------------------------------------------------------------ versions
    def add_harness_version(self, version: str, parent: str | None, spec: dict[str, Any],
                            diff: list[dict[str, Any]]) -> HarnessVersion:
        """Record a harness spec by its content hash (idempotent: the hash names the content)."""
        def make(s: Session) -> HarnessVersionRow:
            if parent is not None:
                self._get(s, HarnessVersionRow, parent, "harness version")
            return HarnessVersionRow(version=version, parent=parent, spec=spec, diff=diff, created=utcnow())

        return self._once(lambda s: s.get(HarnessVersionRow, version), make, _harness)

    def get_harness_version(self, version: str) -> HarnessVersion:
        with self._read() as s:
            return _harness(self._get(s, HarnessVersionRow, version, "harness version"))

    def add_policy_version(self, pv: PolicyVersion) -> PolicyVersion:
        """Record a checkpoint (idempotent by id). Its campaign, parent and harness version must exist."""
        def make(s: Session) -> PolicyVersionRow:
            self._campaign_row(s, pv.campaign_id)
            self._get(s, HarnessVersionRow, pv.harness_version, "harness version")
            if pv.parent_id is not None:
                self._get(s, PolicyVersionRow, pv.parent_id, "policy version")
            return PolicyVersionRow(**pv.model_dump())

        return self._once(lambda s: s.get(PolicyVersionRow, pv.id), make, _policy)

    def set_version_accuracy(self, id: str, accuracy: float, split: str = "selection") -> PolicyVersion:
        """Record a policy version's accuracy on the selection split, or with ``split="decision"`` its
        ``eval_accuracy`` (either measured after the version was made: a merged average is scored by the campaign)."""
        if split not in ("selection", "decision"):
            raise ValueError(f"split={split!r}: a policy version records 'selection' or 'decision' accuracy")
        with self._write() as s:
            r = self._get(s, PolicyVersionRow, id, "policy version")
            setattr(r, "selection_accuracy" if split == "selection" else "eval_accuracy", float(accuracy))
            s.flush()
            return _policy(r)

    def get_policy_version(self, id: str) -> PolicyVersion:
        with self._read() as s:
            return _policy(self._get(s, PolicyVersionRow, id, "policy version"))

    def policy_lineage(self, campaign_id: str) -> list[PolicyVersion]:
        """Every policy version of the campaign, in creation order."""
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = (select(PolicyVersionRow).where(PolicyVersionRow.campaign_id == campaign_id)
                 .order_by(PolicyVersionRow.created, PolicyVersionRow.step, PolicyVersionRow.id))
            return [_policy(r) for r in s.scalars(q)]

    # ------------------------------------------------------------------------------------------ findings
    def add_findings(self, campaign_id: str, round: int, run_name: str, findings: list[Finding]) -> int:
        """Store the diagnosis of one run in one round; if that run was already stored, keep it.

        Returns the number of findings stored for (campaign, round, run_name) after the call.
        """
        key = (FindingRow.campaign_id == campaign_id, FindingRow.round == round, FindingRow.run_name == run_name)

        def count(s: Session) -> int:
            return s.scalar(select(func.count()).select_from(FindingRow).where(*key)) or 0

        try:
            with self._write() as s:
                self._campaign_row(s, campaign_id)
                stored = count(s)
                if stored:
                    return stored
                for i, f in enumerate(findings):
                    s.add(FindingRow(campaign_id=campaign_id, round=round, run_name=run_name, idx=i, symptom=f.symptom,
                                     severity=f.severity, diagnostic=f.diagnostic, data=f.model_dump(mode="json")))
                s.flush()
                return count(s)
        except IntegrityError:
            with self._read() as s:
                stored = count(s)
                if not stored:
                    raise
                return stored

    def list_findings(self, campaign_id: str, round: int | None = None, run_name: str | None = None) -> list[Finding]:
        """Findings of a campaign (optionally one round / one run), in the order they were stored."""
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(FindingRow).where(FindingRow.campaign_id == campaign_id)
            if round is not None:
                q = q.where(FindingRow.round == round)
            if run_name is not None:
                q = q.where(FindingRow.run_name == run_name)
            q = q.order_by(FindingRow.round, FindingRow.id)
            return [Finding.model_validate(r.data) for r in s.scalars(q)]

    # ------------------------------------------------------------------------------------------ ledger
    def ledger_add(self, entry: LedgerEntry) -> bool:
        """Count training steps once: True if recorded now, False if this key was already in the ledger."""
        def find(s: Session) -> LedgerRow | None:
            return s.scalar(select(LedgerRow).where(LedgerRow.campaign_id == entry.campaign_id,
                                                    LedgerRow.key == entry.key))

        try:
            with self._write() as s:
                self._campaign_row(s, entry.campaign_id)
                if find(s) is not None:
                    return False
                s.add(LedgerRow(**entry.model_dump()))
                s.flush()
            return True
        except IntegrityError:
            with self._read() as s:
                if find(s) is None:
                    raise
                return False

    def ledger_total(self, campaign_id: str) -> int:
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(func.coalesce(func.sum(LedgerRow.steps), 0)).where(LedgerRow.campaign_id == campaign_id)
            return int(s.scalar(q) or 0)

    def ledger_totals(self) -> dict[str, int]:
        """Campaign id -> steps spent, for every campaign with ledger entries (one query)."""
        with self._read() as s:
            q = select(LedgerRow.campaign_id, func.sum(LedgerRow.steps)).group_by(LedgerRow.campaign_id)
            return {cid: int(n or 0) for cid, n in s.execute(q)}

    def ledger(self, campaign_id: str) -> list[LedgerEntry]:
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(LedgerRow).where(LedgerRow.campaign_id == campaign_id).order_by(LedgerRow.id)
            return [_ledger(r) for r in s.scalars(q)]

    # ------------------------------------------------------------------------------------------ events
    def log_event(self, campaign_id: str, kind: str, message: dict[str, Any], at: datetime | None = None) -> Event:
        """Append a line to the campaign's history (not idempotent: a log records every attempt)."""
        if not kind or len(kind) > 64:
            raise StoreError(f"event kind must be 1-64 characters, got {kind!r}")
        with self._write() as s:
            self._campaign_row(s, campaign_id)
            row = EventRow(campaign_id=campaign_id, at=at or utcnow(), kind=kind, message=message)
            s.add(row)
            s.flush()
            return _event(row)

    def events(self, campaign_id: str, kind: str | None = None, limit: int | None = None) -> list[Event]:
        """The campaign's history, oldest first (the last ``limit`` events if given)."""
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(EventRow).where(EventRow.campaign_id == campaign_id)
            if kind is not None:
                q = q.where(EventRow.kind == kind)
            if limit is not None:
                q = q.order_by(EventRow.id.desc()).limit(limit)
                return [_event(r) for r in reversed(s.scalars(q).all())]
            return [_event(r) for r in s.scalars(q.order_by(EventRow.id))]
