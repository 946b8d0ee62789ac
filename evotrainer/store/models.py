"""The campaign database as SQLAlchemy tables. Only ``store.py`` (and its mixin ``ownership.py``) import this module.

Why rows and entities are separate: these classes are how the data is laid out (indexed columns for what we
filter on, JSON for what we only read back whole, surrogate keys, uniqueness that makes writes idempotent);
``evotrainer.core.domain`` is what the rest of the program talks about. The facade converts one into the
other, so a column can be split or renamed with a migration and no caller notices.

Every closed vocabulary (status, verdict, outcome, role, kind, severity) is a CHECK constraint built from the
``Literal`` in the schemas (for skills, in ``evotrainer.library.format``), so the database refuses a value the
program does not know, whoever writes it.
A change to a ``Literal`` therefore needs a migration; ``tests/test_store.py`` fails until there is one.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, get_args

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from evotrainer.core.domain import (
    BranchRole,
    BranchStatus,
    CampaignStatus,
    LedgerKind,
    Outcome,
    ProposalStatus,
    Review,
    Severity,
    SkillKind,
    SkillStatus,
)

# Deterministic constraint names: migrations can refer to them and SQLite batch mode can recreate them.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

VOCABULARIES: dict[str, tuple[str, ...]] = {
    "campaign_status": get_args(CampaignStatus),
    "proposal_status": get_args(ProposalStatus),
    "review_verdict": get_args(Review.model_fields["verdict"].annotation),
    "outcome": get_args(Outcome),
    "branch_role": get_args(BranchRole),
    "branch_status": get_args(BranchStatus),
    "ledger_kind": get_args(LedgerKind),
    "severity": get_args(Severity),
    "skill_kind": get_args(SkillKind),
    "skill_status": get_args(SkillStatus),
}

# SQLite's FTS5 full-text index of the skills (migration 0002). It is a virtual table with shadow tables
# (skills_fts_data, …) that no ORM model describes; autogenerate and schema comparisons must skip them.
SKILLS_FTS = "skills_fts"


def is_fts_table(name: str | None) -> bool:
    return name is not None and (name == SKILLS_FTS or name.startswith(SKILLS_FTS + "_"))


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic ``include_name`` hook: everything except the FTS5 tables."""
    return not (type_ == "table" and is_fts_table(name))


def one_of(column: str, vocabulary: str) -> CheckConstraint:
    """``CHECK (column IN (...))`` named after the column (``ck_<table>_<column>``)."""
    values = ", ".join(f"'{v}'" for v in VOCABULARIES[vocabulary])
    return CheckConstraint(f"{column} IN ({values})", name=column)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps are stored in UTC and always come back timezone-aware.

    SQLite has no time zones (it keeps the text), so the value is stored as naive UTC there; PostgreSQL gets
    ``timestamptz``. A naive datetime handed in is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _campaign_fk() -> Mapped[str]:
    return mapped_column(String(200), ForeignKey("campaigns.id"), index=True)


class CampaignRow(Base):
    __tablename__ = "campaigns"
    __table_args__ = (one_of("status", "campaign_status"),)

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(32))
    # A policy version id; not a foreign key because policy_versions already points at campaigns.
    mainline_version: Mapped[str | None] = mapped_column(String(200))
    thread_id: Mapped[str] = mapped_column(String(200))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    updated: Mapped[datetime] = mapped_column(UTCDateTime)


class HarnessVersionRow(Base):
    """A harness spec by content hash; ``parent`` + ``diff`` make the versions a DAG."""

    __tablename__ = "harness_versions"

    version: Mapped[str] = mapped_column(String(128), primary_key=True)
    parent: Mapped[str | None] = mapped_column(String(128), ForeignKey("harness_versions.version"))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    diff: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created: Mapped[datetime] = mapped_column(UTCDateTime)


class PolicyVersionRow(Base):
    """A trained checkpoint; ``parent_id`` is the checkpoint it was forked or continued from."""

    __tablename__ = "policy_versions"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    campaign_id: Mapped[str] = _campaign_fk()
    parent_id: Mapped[str | None] = mapped_column(String(200), ForeignKey("policy_versions.id"))
    harness_version: Mapped[str] = mapped_column(String(128), ForeignKey("harness_versions.version"))
    checkpoint: Mapped[str] = mapped_column(Text)
    run_name: Mapped[str | None] = mapped_column(String(300))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(200))
    eval_accuracy: Mapped[float | None] = mapped_column(Float)
    step: Mapped[int] = mapped_column(Integer)
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    selection_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)


class FindingRow(Base):
    """One diagnostic finding; ``idx`` is its position in the batch for (campaign, round, run)."""

    __tablename__ = "findings"
    __table_args__ = (
        UniqueConstraint("campaign_id", "round", "run_name", "idx"),
        one_of("severity", "severity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = _campaign_fk()
    round: Mapped[int] = mapped_column(Integer)
    run_name: Mapped[str] = mapped_column(String(300))
    idx: Mapped[int] = mapped_column(Integer)
    symptom: Mapped[str] = mapped_column(String(64), index=True)
    severity: Mapped[str] = mapped_column(String(16), index=True)
    diagnostic: Mapped[str] = mapped_column(String(128), index=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class ProposalRow(Base):
    __tablename__ = "proposals"
    __table_args__ = (one_of("status", "proposal_status"),)

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    campaign_id: Mapped[str] = _campaign_fk()
    round: Mapped[int] = mapped_column(Integer)
    knob: Mapped[str] = mapped_column(String(200))
    old: Mapped[Any] = mapped_column(JSON, nullable=True)
    new: Mapped[Any] = mapped_column(JSON, nullable=True)
    symptom: Mapped[str] = mapped_column(String(64), index=True)
    cause: Mapped[str] = mapped_column(Text)
    change: Mapped[str] = mapped_column(Text)
    expected_effect: Mapped[str] = mapped_column(Text)
    rationale: Mapped[str] = mapped_column(Text)
    cited_skills: Mapped[list[str]] = mapped_column(JSON)
    brain: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(32), index=True)
    harness_version: Mapped[str] = mapped_column(String(128))
    created: Mapped[datetime] = mapped_column(UTCDateTime)


class ReviewRow(Base):
    """At most one review per proposal: the proposal id is the primary key."""

    __tablename__ = "reviews"
    __table_args__ = (one_of("verdict", "review_verdict"),)

    proposal_id: Mapped[str] = mapped_column(String(200), ForeignKey("proposals.id"), primary_key=True)
    verdict: Mapped[str] = mapped_column(String(16))
    reviewer: Mapped[str] = mapped_column(String(200))
    comment: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime)


class BacktestRow(Base):
    __tablename__ = "backtests"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    campaign_id: Mapped[str] = _campaign_fk()
    round: Mapped[int] = mapped_column(Integer)
    proposal_ids: Mapped[list[str]] = mapped_column(JSON)
    seeds: Mapped[list[int]] = mapped_column(JSON)
    branch_steps: Mapped[int] = mapped_column(Integer)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)  # proposal id -> BacktestStats
    created: Mapped[datetime] = mapped_column(UTCDateTime)


class BranchRow(Base):
    """One branch of a backtest.

    ``proposal_key`` is the proposal id, or '' for a control branch shared by every proposal: UNIQUE treats
    NULLs as distinct, so the nullable ``proposal_id`` alone could not stop a duplicate control branch.
    """

    __tablename__ = "branches"
    __table_args__ = (
        UniqueConstraint("backtest_id", "proposal_key", "role", "seed"),
        one_of("role", "branch_role"),
        one_of("status", "branch_status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    backtest_id: Mapped[str] = mapped_column(String(200), ForeignKey("backtests.id"), index=True)
    proposal_id: Mapped[str | None] = mapped_column(String(200), ForeignKey("proposals.id"))
    proposal_key: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    seed: Mapped[int] = mapped_column(Integer)
    run_name: Mapped[str | None] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    eval_accuracy: Mapped[float | None] = mapped_column(Float)
    train_reward: Mapped[float | None] = mapped_column(Float)
    gate_passed: Mapped[bool | None] = mapped_column(Boolean)
    gate_reasons: Mapped[list[str]] = mapped_column(JSON)
    steps: Mapped[int] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    looks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    selection_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)


class DecisionRow(Base):
    """One decision per proposal: the proposal id is the primary key."""

    __tablename__ = "decisions"
    __table_args__ = (one_of("outcome", "outcome"),)

    proposal_id: Mapped[str] = mapped_column(String(200), ForeignKey("proposals.id"), primary_key=True)
    outcome: Mapped[str] = mapped_column(String(16))
    reasons: Mapped[list[str]] = mapped_column(JSON)
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    gate_reasons: Mapped[list[str]] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UTCDateTime)


class LedgerRow(Base):
    """Training steps spent, keyed so that a re-run node cannot count the same segment or branch twice."""

    __tablename__ = "ledger"
    __table_args__ = (
        UniqueConstraint("campaign_id", "key"),
        one_of("kind", "ledger_kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = _campaign_fk()
    key: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(16))
    run_name: Mapped[str | None] = mapped_column(String(300))
    steps: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime)


class EventRow(Base):
    """The campaign log shown by ``campaign status``; ``kind`` is free text (no closed vocabulary yet)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = _campaign_fk()
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[dict[str, Any]] = mapped_column(JSON)


class SkillRow(Base):
    """One entry of a skill library folder as last indexed; ``library`` is the folder's absolute path.

    ``content_hash`` (sha256 of the file) decides whether a re-sync rewrites the row. A file that disappeared
    keeps its row with ``removed`` set, so a proposal that cited it still resolves. On SQLite the searchable
    text is mirrored into the FTS5 table ``skills_fts`` (its rowid is ``id``), created by migration 0002.
    """

    __tablename__ = "skills"
    __table_args__ = (
        UniqueConstraint("library", "slug"),
        one_of("kind", "skill_kind"),
        one_of("status", "skill_status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    library: Mapped[str] = mapped_column(String(1000))
    slug: Mapped[str] = mapped_column(String(100), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    symptoms: Mapped[list[str]] = mapped_column(JSON)
    knob: Mapped[str] = mapped_column(String(200))
    available: Mapped[bool] = mapped_column(Boolean)
    body: Mapped[str] = mapped_column(Text)
    front_matter: Mapped[dict[str, Any]] = mapped_column(JSON)
    indexed: Mapped[datetime] = mapped_column(UTCDateTime)
    removed: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class LeaseRow(Base):
    """Who owns a campaign now: at most one lease per campaign (the campaign id is the primary key).

    ``token`` identifies one holding of the lease, so an owner that was taken over cannot renew or release its
    successor's lease. ``started`` is the owner process's start time (epoch seconds): with ``pid`` it tells
    the owner apart from a later process that got the same pid.
    """

    __tablename__ = "campaign_leases"

    campaign_id: Mapped[str] = mapped_column(String(200), ForeignKey("campaigns.id"), primary_key=True)
    token: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started: Mapped[float] = mapped_column(Float)
    purpose: Mapped[str] = mapped_column(String(32))
    acquired: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat: Mapped[datetime] = mapped_column(UTCDateTime)


class ProcessRow(Base):
    """A process a campaign's owner started (a pool worker), so a later owner can end it if it outlived its owner."""

    __tablename__ = "campaign_processes"
    __table_args__ = (UniqueConstraint("campaign_id", "host", "pid", "started"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = _campaign_fk()
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started: Mapped[float] = mapped_column(Float)
    role: Mapped[str] = mapped_column(String(32))
    recorded: Mapped[datetime] = mapped_column(UTCDateTime)
