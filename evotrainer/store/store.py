"""``Store``: the one object that reads and writes campaign state. Everything else sees pydantic entities.

Three rules shape every method:

* **Idempotent writes.** A campaign node can be killed (``kill -9``) after a write and run again on resume,
  so every write with a natural key (an id, a (backtest, proposal, role, seed) slot, a ledger key) returns
  what is already stored instead of writing twice. The database enforces the keys (primary keys, UNIQUE);
  the methods only turn a clash into "return the stored one". First write wins: a re-run never replaces.
* **Short transactions.** Each method opens a session, does its work, converts rows to entities and
  commits; no session or row escapes. Writes on SQLite start with ``BEGIN IMMEDIATE`` so two processes (a
  campaign and ``review approve``) queue on the busy timeout instead of failing when a read transaction
  tries to become a write one.
* **Errors that say what exists.** Unknown ids raise ``NotFound`` naming the id and a few that do exist.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, get_args

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, Text, cast, create_engine, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, object_session

from evotrainer.bm25 import BM25, tokenize
from evotrainer.domain import (
    BacktestStats,
    BranchResult,
    Campaign,
    CampaignStatus,
    Decision,
    Finding,
    HarnessVersion,
    Hypothesis,
    LedgerEntry,
    PolicyVersion,
    Proposal,
    ProposalStatus,
    Review,
)
from evotrainer.errors import ConfigError, EvoError
from evotrainer.names import check_name
from evotrainer.store.entities import Backtest, Event, IndexedSkill, SkillDoc, SkillMatch, SkillSync
from evotrainer.store.models import (
    SKILLS_FTS,
    BacktestRow,
    BranchRow,
    CampaignRow,
    DecisionRow,
    EventRow,
    FindingRow,
    HarnessVersionRow,
    LeaseRow,
    LedgerRow,
    PolicyVersionRow,
    ProposalRow,
    ReviewRow,
    SkillRow,
    utcnow,
)
from evotrainer.store.ownership import OwnershipMixin, owner_of, shown_status

STATE_URL_ENV = "EVOTRAINER_STATE_URL"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_UNSET: Any = object()
MIGRATION_LOCK_KEY = 0x65766F7472  # PostgreSQL advisory lock held while migrating ("evotr")
T = TypeVar("T")


PG_EXAMPLE = "postgresql+psycopg://user:password@host:5432/evotrainer"
# What to install for a driver SQLAlchemy could not import (by module name).
DRIVER_INSTALL = {
    "psycopg": "pip install 'psycopg[binary]' (or pip install 'evotrainer[team]')",
    "psycopg2": "use the psycopg 3 driver instead: postgresql+psycopg://… with pip install 'psycopg[binary]' "
                "(or pip install 'evotrainer[team]'); or pip install psycopg2-binary",
}


def _create_engine(url: Any, kw: dict[str, Any]) -> Engine:
    """``create_engine``, with a missing driver or unknown dialect told as what to install or set."""
    shown = url.render_as_string(hide_password=True)
    try:
        return create_engine(url, **kw)
    except NoSuchModuleError:
        raise ConfigError(f"state store URL {shown!r}: SQLAlchemy has no dialect '{url.drivername}'; "
                          f"use sqlite:///PATH or {PG_EXAMPLE} ({STATE_URL_ENV})") from None
    except ImportError as e:
        name = (e.name or "").split(".")[0]
        raise ConfigError(f"the state store {shown!r} needs the database driver '{name or e}', which is not "
                          f"installed: {DRIVER_INSTALL.get(name, f'pip install {name}')}") from None


class StoreError(EvoError):
    """A write the store refuses (a conflicting review, a status outside the vocabulary)."""


class NotFound(StoreError):
    """An id that is not in the store; the message names it and some that are."""

    exit_code = 2


def alembic_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` for the store's migrations, built in code (there is no alembic.ini).

    To write the next migration after changing ``models.py``::

        from alembic import command
        command.revision(alembic_config("sqlite:///scratch.db"), message="...", autogenerate=True)

    then read and edit the generated file (CHECK lists must be literal text, as in ``0001_initial.py``).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolation
    return cfg


def _check(value: str, allowed: Any, what: str) -> str:
    choices = get_args(allowed)
    if value not in choices:
        raise StoreError(f"invalid {what} '{value}'; allowed: {', '.join(choices)}")
    return value


# ------------------------------------------------------------------------------------------ rows -> entities
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


class Store(OwnershipMixin):
    """Campaign state in one SQL database (SQLite file by default; any SQLAlchemy URL by configuration).

    Opening a store brings its schema to the newest migration (a no-op when it is already there), so a
    new release can open an old home. Safe to open from several processes at once.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0):
        self.url = url
        try:
            parsed = make_url(url)
        except ArgumentError:
            shown = url if "@" not in url else "…@" + url.rsplit("@", 1)[1]  # never print a password
            raise ConfigError(f"state store URL {shown!r} is not a database URL; set {STATE_URL_ENV} to e.g. "
                              f"{PG_EXAMPLE}, or unset it for sqlite:///HOME/state.db") from None
        self._sqlite = parsed.get_backend_name() == "sqlite"
        if self._sqlite and parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kw: dict[str, Any] = {"connect_args": {"timeout": busy_timeout_s}} if self._sqlite else {"pool_pre_ping": True}
        self._engine: Engine = _create_engine(parsed, kw)
        if self._sqlite:
            _sqlite_setup(self._engine, busy_timeout_s)
        # Writes go through this view of the engine: on SQLite its transactions start with BEGIN IMMEDIATE.
        self._writer: Engine = self._engine.execution_options(sqlite_begin="IMMEDIATE")
        self._migrate()

    @classmethod
    def for_home(cls, home: Path) -> Store:
        """``$EVOTRAINER_STATE_URL`` if set (e.g. ``postgresql+psycopg://…``), else ``sqlite:///HOME/state.db``."""
        url = os.environ.get(STATE_URL_ENV, "").strip()
        return cls(url or f"sqlite:///{Path(home).expanduser().resolve() / 'state.db'}")

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({make_url(self.url).render_as_string(hide_password=True)!r})"

    # ------------------------------------------------------------------------------------------ plumbing
    def _migrate(self) -> None:
        cfg = alembic_config()
        heads = set(ScriptDirectory.from_config(cfg).get_heads())
        try:
            conn = self._engine.connect()
        except OperationalError as e:
            if self._sqlite:
                raise
            shown = make_url(self.url).render_as_string(hide_password=True)
            raise ConfigError(f"cannot reach the state store {shown} ({STATE_URL_ENV}): "
                              f"{str(e.orig).strip().splitlines()[0]}") from None
        with conn:
            if set(MigrationContext.configure(conn).get_current_heads()) == heads:
                return
        # The write lock is taken before Alembic reads the version table, so of two processes opening a new
        # file at once, the second waits and then finds the schema at head. SQLite: BEGIN IMMEDIATE. PostgreSQL
        # does not serialise writers, and two concurrent CREATE TABLEs of one name fail (pg_type's unique index):
        # a transaction-level advisory lock, released at commit, queues them.
        with self._writer.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine) as s, s.begin():
            yield s

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer) as s, s.begin():
            yield s

    def _once(self, find: Callable[[Session], Any], make: Callable[[Session], Any], convert: Callable[[Any], T]) -> T:
        """Return ``convert(find())`` if the keyed row exists, else insert ``make()`` and return it converted.

        ``make`` may raise (NotFound for a missing parent). A UNIQUE clash with a concurrent writer (possible on
        PostgreSQL, where writes are not serialised) is answered by reading the winner's row.
        """
        try:
            with self._write() as s:
                row = find(s)
                if row is None:
                    row = make(s)
                    s.add(row)
                    s.flush()
                return convert(row)
        except IntegrityError:
            with self._read() as s:
                row = find(s)
                if row is None:
                    raise
                return convert(row)

    @staticmethod
    def _missing(s: Session, column: Any, key: str, what: str) -> NotFound:
        names = s.scalars(select(column).order_by(column.desc()).limit(6)).all()
        if not names:
            return NotFound(f"{what} '{key}' not found; the store has no {what}s yet")
        shown = ", ".join(str(n) for n in names[:5]) + (", …" if len(names) > 5 else "")
        return NotFound(f"{what} '{key}' not found; existing {what}s include: {shown}")

    def _get(self, s: Session, model: type, key: str, what: str) -> Any:
        row = s.get(model, key)
        if row is None:
            pk = model.__mapper__.primary_key[0]
            raise self._missing(s, pk, key, what)
        return row

    def _campaign_row(self, s: Session, campaign_id: str) -> CampaignRow:
        check_name(campaign_id, "campaign id")  # the one name rule: an id is also HOME/campaigns/<id>
        return self._get(s, CampaignRow, campaign_id, "campaign")

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

    def set_selection_accuracy(self, id: str, accuracy: float) -> PolicyVersion:
        """Record a policy version's accuracy on the selection split (measured after the version was made)."""
        with self._write() as s:
            r = self._get(s, PolicyVersionRow, id, "policy version")
            r.selection_accuracy = float(accuracy)
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

    # ------------------------------------------------------------------------------------------ skill index
    def sync_skills(self, library: str, docs: list[SkillDoc]) -> SkillSync:
        """Make the index of ``library`` (a folder path) match ``docs``, the files it holds now.

        A new slug is added, a slug whose ``content_hash`` differs is rewritten (a removed one that is back
        counts as changed), and a slug with no doc is marked ``removed`` — never deleted. Unchanged rows are
        not touched, so a re-sync of an unchanged library writes nothing. On SQLite the FTS5 index follows.
        """
        seen = [d.slug for d in docs]
        if len(set(seen)) != len(seen):
            raise StoreError(f"duplicate slugs in one sync of {library}: {sorted({x for x in seen if seen.count(x) > 1})}")
        report = SkillSync(library=library)
        with self._write() as s:
            rows = {r.slug: r for r in s.scalars(select(SkillRow).where(SkillRow.library == library))}
            now = utcnow()
            for d in docs:
                r = rows.get(d.slug)
                if r is not None and r.content_hash == d.content_hash and r.removed is None:
                    report.unchanged.append(d.slug)
                    continue
                if r is None:
                    r = SkillRow(library=library, **d.model_dump(), indexed=now, removed=None)
                    s.add(r)
                    report.added.append(d.slug)
                else:
                    for k, v in d.model_dump().items():
                        setattr(r, k, v)
                    r.indexed, r.removed = now, None
                    report.changed.append(d.slug)
                s.flush()
                self._fts_put(s, r)
            for slug, r in rows.items():
                if slug not in set(seen) and r.removed is None:
                    r.removed = now
                    report.removed.append(slug)
                    self._fts_drop(s, r.id)
        return report

    def list_skills(self, library: str | None = None, *, include_removed: bool = False) -> list[IndexedSkill]:
        """Indexed skills (of one library folder, or of all), by library then slug."""
        with self._read() as s:
            q = select(SkillRow)
            if library is not None:
                q = q.where(SkillRow.library == library)
            if not include_removed:
                q = q.where(SkillRow.removed.is_(None))
            return [_skill(r) for r in s.scalars(q.order_by(SkillRow.library, SkillRow.slug))]

    def get_skill(self, library: str, slug: str) -> IndexedSkill:
        """One indexed skill, removed or not; ``NotFound`` names some slugs of that library."""
        with self._read() as s:
            r = s.scalar(select(SkillRow).where(SkillRow.library == library, SkillRow.slug == slug))
            if r is None:
                names = s.scalars(select(SkillRow.slug).where(SkillRow.library == library)
                                  .order_by(SkillRow.slug).limit(6)).all()
                shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
                raise NotFound(f"skill '{slug}' not found in the index of {library}; "
                               + (f"indexed skills include: {shown}" if names else "nothing is indexed there yet"))
            return _skill(r)

    def search_skills(self, library: str, query: str, limit: int = 10) -> list[SkillMatch]:
        """Present skills of ``library`` ranked by text relevance to ``query`` (best first, score > 0).

        SQLite: FTS5 ``bm25()`` with column weights name 4, keywords 3, description 2, body 1 (any query word
        may match). Other databases: the same weights through the pure-Python BM25 of ``library.bm25``.
        """
        words = list(dict.fromkeys(tokenize(query)))
        if not words or limit < 1:
            return []
        with self._read() as s:
            if self._sqlite:
                match = " OR ".join(f'"{w}"' for w in words)
                rows = s.execute(text(
                    f"SELECT k.slug, bm25({SKILLS_FTS}, 4.0, 2.0, 1.0, 3.0) AS rank FROM {SKILLS_FTS} "
                    f"JOIN skills k ON k.id = {SKILLS_FTS}.rowid WHERE {SKILLS_FTS} MATCH :match "
                    "AND k.library = :library AND k.removed IS NULL ORDER BY rank, k.slug LIMIT :limit"),
                    {"match": match, "library": library, "limit": limit}).all()
                return [SkillMatch(slug=slug, score=-rank) for slug, rank in rows if -rank > 0]
            present = s.scalars(select(SkillRow).where(SkillRow.library == library, SkillRow.removed.is_(None))
                                .order_by(SkillRow.slug)).all()
            docs = [" ".join([r.name] * 4 + [_keywords(r)] * 3 + [r.description] * 2 + [r.body]) for r in present]
            scored = sorted(zip(BM25(docs).scores(query), (r.slug for r in present)), key=lambda t: (-t[0], t[1]))
            return [SkillMatch(slug=slug, score=sc) for sc, slug in scored[:limit] if sc > 0]

    def _fts_put(self, s: Session, r: SkillRow) -> None:
        if not self._sqlite:
            return
        self._fts_drop(s, r.id)
        s.execute(text(f"INSERT INTO {SKILLS_FTS}(rowid, name, description, body, keywords) "
                       "VALUES (:id, :name, :description, :body, :keywords)"),
                  {"id": r.id, "name": r.name, "description": r.description, "body": r.body, "keywords": _keywords(r)})

    def _fts_drop(self, s: Session, skill_id: int) -> None:
        if self._sqlite:
            s.execute(text(f"DELETE FROM {SKILLS_FTS} WHERE rowid = :id"), {"id": skill_id})


def _sqlite_setup(engine: Engine, busy_timeout_s: float) -> None:
    """WAL (readers never block the writer), a busy timeout, foreign keys, and explicit BEGINs.

    pysqlite's own transaction handling starts a transaction lazily at the first write, so a session that
    read first would try to upgrade its lock mid-transaction and fail at once with "database is locked" if
    another process wrote meanwhile; emitting BEGIN ourselves (IMMEDIATE for writes) makes writers queue.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN in _on_begin
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('sqlite_begin', 'DEFERRED')}")


__all__ = ["Store", "StoreError", "NotFound", "alembic_config", "STATE_URL_ENV"]
