"""Who owns a campaign: its lease and the processes its owner started. Part of ``Store`` (a mixin).

One process at a time runs a campaign. It takes the campaign's **lease** — owner pid, host, the process's
start time, a heartbeat — in one transaction, renews the heartbeat every ``HEARTBEAT_S`` seconds and drops
the lease when it exits. A lease is **live** while its owner is:

* on this host: the process with that pid *and* that start time still runs (so a pid the kernel gave to
  another process does not keep a dead owner's lease);
* on another host (a shared PostgreSQL store): its heartbeat is younger than ``STALE_AFTER_S``.

A second runner meets a live lease and is refused (``CampaignBusy``, exit 2) with the owner named; a lease
that is not live is taken over, and the takeover is written to the campaign's events in the same
transaction. The campaign's row is locked first (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite writes are
serialised by ``BEGIN IMMEDIATE``), so of two runners that start together exactly one gets the lease.

Campaign reads use the lease too: a campaign stored as ``running`` whose lease is not live is reported as
``interrupted`` (see ``ShownCampaignStatus``), so a dead campaign never reads as running.

Hosts compare heartbeats on their own clocks (UTC): keep them in sync (NTP); the limit tolerates small skew.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from evotrainer.core import procs
from evotrainer.core.domain import CampaignOwner
from evotrainer.core.errors import CampaignBusy
from evotrainer.store.base import StoreBase
from evotrainer.store.entities import Lease, RecordedProcess
from evotrainer.store.models import CampaignRow, EventRow, LeaseRow, ProcessRow, utcnow

HEARTBEAT_S = 5.0  # an owner renews its lease this often
STALE_AFTER_S = 60.0  # a lease held from another host is taken to be dead when its heartbeat is older than this


def owner_of(row: LeaseRow, now: datetime | None = None) -> CampaignOwner:
    """The lease row as an entity, with its liveness decided now (the rule in the module docstring)."""
    if row.host == procs.hostname():
        live = procs.alive(row.pid, row.started)
    else:
        live = ((now or utcnow()) - row.heartbeat).total_seconds() < STALE_AFTER_S
    return CampaignOwner(host=row.host, pid=row.pid, started=row.started, purpose=row.purpose, acquired=row.acquired,
                         heartbeat=row.heartbeat, live=live)


def shown_status(stored: str, owner: CampaignOwner | None) -> str:
    """What a campaign is: the stored status, except ``running`` without a live owner is ``interrupted``."""
    if stored == "running" and (owner is None or not owner.live):
        return "interrupted"
    return stored


def gone_reason(o: CampaignOwner, now: datetime) -> str:
    if o.host != procs.hostname():
        age = (now - o.heartbeat).total_seconds()
        return f"no heartbeat from {o.host} for {age:.0f} s (limit {STALE_AFTER_S:.0f} s)"
    if procs.start_time(o.pid) is None:
        return f"owner pid {o.pid} on {o.host} is gone"
    return f"pid {o.pid} on {o.host} now belongs to another process (its start time differs) or is a zombie"


def busy_message(campaign_id: str, o: CampaignOwner, now: datetime) -> str:
    age = (now - o.heartbeat).total_seconds()
    return (f"campaign {campaign_id} is already running: owner pid {o.pid} on {o.host} ({o.purpose}, since "
            f"{o.acquired:%Y-%m-%d %H:%M:%S} UTC, last heartbeat {age:.0f} s ago). Stop it with `evotrainer campaign "
            f"stop {campaign_id}` (add --now to end it at once), or wait until it exits")


class OwnershipMixin(StoreBase):
    """Lease and process-record methods of ``Store`` (they use its ``_write``/``_read`` transactions)."""

    def acquire_lease(self, campaign_id: str, purpose: str, me: procs.ProcessRef | None = None) -> Lease:
        """Take the campaign's lease for ``me`` (default: this process), taking over one whose owner is gone.

        Raises ``CampaignBusy`` (exit 2) naming the owner when a live one holds it, ``NotFound`` for an unknown
        campaign. A takeover is recorded as an ``owner_takeover`` event in the same transaction.
        """
        me = me or procs.this_process()
        now = utcnow()
        token = uuid.uuid4().hex
        with self._write() as s:
            if s.get(CampaignRow, campaign_id, with_for_update=True) is None:
                raise self._missing(s, CampaignRow.id, campaign_id, "campaign")
            row = s.get(LeaseRow, campaign_id)
            previous = reason = None
            if row is not None:
                previous = owner_of(row, now)
                if previous.live:
                    raise CampaignBusy(busy_message(campaign_id, previous, now))
                reason = gone_reason(previous, now)
                s.add(EventRow(campaign_id=campaign_id, at=now, kind="owner_takeover", message={
                    "previous": previous.model_dump(mode="json", exclude={"live"}), "reason": reason,
                    "by": {"host": me.host, "pid": me.pid, "purpose": purpose}}))
            else:
                row = LeaseRow(campaign_id=campaign_id)
                s.add(row)
            row.token, row.host, row.pid, row.started, row.purpose = token, me.host, me.pid, me.started, purpose
            row.acquired = row.heartbeat = now
            s.flush()
            owner = CampaignOwner(host=me.host, pid=me.pid, started=me.started, purpose=purpose, acquired=now,
                                  heartbeat=now, live=True)
        return Lease(campaign_id=campaign_id, token=token, owner=owner, took_over=previous, reason=reason)

    def renew_lease(self, campaign_id: str, token: str) -> bool:
        """Heartbeat: True if the lease is still this holder's (False: it was released or taken over)."""
        with self._write() as s:
            res = s.execute(update(LeaseRow).where(LeaseRow.campaign_id == campaign_id, LeaseRow.token == token)
                            .values(heartbeat=utcnow()))
            return res.rowcount == 1

    def release_lease(self, campaign_id: str, token: str) -> bool:
        """Drop the lease if this holder still has it; True if it was dropped."""
        with self._write() as s:
            res = s.execute(delete(LeaseRow).where(LeaseRow.campaign_id == campaign_id, LeaseRow.token == token))
            return res.rowcount == 1

    def get_owner(self, campaign_id: str) -> CampaignOwner | None:
        """The lease's holder (with ``live`` decided now), or None when nobody holds it."""
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            row = s.get(LeaseRow, campaign_id)
            return owner_of(row) if row is not None else None

    # ------------------------------------------------------------------------------------------ processes
    def record_processes(self, campaign_id: str, refs: list[procs.ProcessRef], role: str = "worker") -> int:
        """Record processes the campaign's owner started (idempotent by host, pid and start time)."""
        n = 0
        for r in refs:
            try:
                with self._write() as s:
                    self._campaign_row(s, campaign_id)
                    found = s.scalar(select(ProcessRow.id).where(
                        ProcessRow.campaign_id == campaign_id, ProcessRow.host == r.host, ProcessRow.pid == r.pid,
                        ProcessRow.started == r.started))
                    if found is None:
                        s.add(ProcessRow(campaign_id=campaign_id, host=r.host, pid=r.pid, started=r.started, role=role,
                                         recorded=utcnow()))
                        n += 1
            except IntegrityError:  # a concurrent writer recorded the same process
                continue
        return n

    def list_processes(self, campaign_id: str) -> list[RecordedProcess]:
        with self._read() as s:
            self._campaign_row(s, campaign_id)
            q = select(ProcessRow).where(ProcessRow.campaign_id == campaign_id).order_by(ProcessRow.id)
            return [RecordedProcess(id=r.id, campaign_id=r.campaign_id, host=r.host, pid=r.pid, started=r.started,
                                    role=r.role, recorded=r.recorded) for r in s.scalars(q)]

    def forget_processes(self, campaign_id: str, ids: list[int]) -> int:
        """Drop the records ``ids`` (processes that are gone); returns how many were dropped."""
        if not ids:
            return 0
        with self._write() as s:
            res = s.execute(delete(ProcessRow).where(ProcessRow.campaign_id == campaign_id, ProcessRow.id.in_(ids)))
            return res.rowcount or 0


__all__ = ["OwnershipMixin", "owner_of", "shown_status", "HEARTBEAT_S", "STALE_AFTER_S"]
