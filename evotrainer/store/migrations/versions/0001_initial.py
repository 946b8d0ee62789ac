"""Initial schema: campaigns, versions, findings, proposals, reviews, backtests, branches, decisions, ledger, events.

Written out in full (not generated at runtime) so that what a database contains depends on this file alone.
The CHECK lists are literal copies of the vocabularies in ``evotrainer.core.domain`` as of this revision;
when a ``Literal`` gains a value, add a migration that recreates the constraint (``batch_alter_table`` on
SQLite) — ``tests/test_store.py`` compares them with the models and fails until then.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _utc(name: str) -> sa.Column:
    """A timestamp column; ``UTCDateTime`` in the models stores UTC in it."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def _one_of(table: str, column: str, *values: str) -> sa.CheckConstraint:
    quoted = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=op.f(f"ck_{table}_{column}"))


def _campaign_id(table: str) -> tuple[sa.Column, sa.ForeignKeyConstraint]:
    return (sa.Column("campaign_id", sa.String(200), nullable=False),
            sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"], name=op.f(f"fk_{table}_campaign_id_campaigns")))


def _index(table: str, *columns: str) -> None:
    for c in columns:
        op.create_index(op.f(f"ix_{table}_{c}"), table, [c], unique=False)


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("mainline_version", sa.String(200), nullable=True),
        sa.Column("thread_id", sa.String(200), nullable=False),
        sa.Column("mlflow_run_id", sa.String(200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _utc("created"),
        _utc("updated"),
        _one_of("campaigns", "status", "created", "running", "waiting_review", "stopped", "finished", "failed"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaigns")),
    )
    op.create_table(
        "harness_versions",
        sa.Column("version", sa.String(128), nullable=False),
        sa.Column("parent", sa.String(128), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("diff", sa.JSON(), nullable=False),
        _utc("created"),
        sa.ForeignKeyConstraint(["parent"], ["harness_versions.version"],
                                name=op.f("fk_harness_versions_parent_harness_versions")),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_harness_versions")),
    )
    op.create_table(
        "policy_versions",
        sa.Column("id", sa.String(200), nullable=False),
        *_campaign_id("policy_versions"),
        sa.Column("parent_id", sa.String(200), nullable=True),
        sa.Column("harness_version", sa.String(128), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=False),
        sa.Column("run_name", sa.String(300), nullable=True),
        sa.Column("mlflow_run_id", sa.String(200), nullable=True),
        sa.Column("eval_accuracy", sa.Float(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        _utc("created"),
        sa.ForeignKeyConstraint(["parent_id"], ["policy_versions.id"],
                                name=op.f("fk_policy_versions_parent_id_policy_versions")),
        sa.ForeignKeyConstraint(["harness_version"], ["harness_versions.version"],
                                name=op.f("fk_policy_versions_harness_version_harness_versions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_versions")),
    )
    _index("policy_versions", "campaign_id")

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_campaign_id("findings"),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("run_name", sa.String(300), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("symptom", sa.String(64), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("diagnostic", sa.String(128), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        _one_of("findings", "severity", "info", "warning", "critical"),
        sa.UniqueConstraint("campaign_id", "round", "run_name", "idx",
                            name=op.f("uq_findings_campaign_id_round_run_name_idx")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    _index("findings", "campaign_id", "symptom", "severity", "diagnostic")

    op.create_table(
        "proposals",
        sa.Column("id", sa.String(200), nullable=False),
        *_campaign_id("proposals"),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("knob", sa.String(200), nullable=False),
        sa.Column("old", sa.JSON(), nullable=True),
        sa.Column("new", sa.JSON(), nullable=True),
        sa.Column("symptom", sa.String(64), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("change", sa.Text(), nullable=False),
        sa.Column("expected_effect", sa.Text(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("cited_skills", sa.JSON(), nullable=False),
        sa.Column("brain", sa.String(200), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("harness_version", sa.String(128), nullable=False),
        _utc("created"),
        _one_of("proposals", "status", "pending_review", "approved", "rejected", "backtesting", "promoted", "refuted",
                "inconclusive", "blocked", "failed", "skipped_budget"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proposals")),
    )
    _index("proposals", "campaign_id", "symptom", "status")

    op.create_table(
        "reviews",
        sa.Column("proposal_id", sa.String(200), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        _utc("at"),
        _one_of("reviews", "verdict", "approve", "reject"),
        sa.ForeignKeyConstraint(["proposal_id"], ["proposals.id"], name=op.f("fk_reviews_proposal_id_proposals")),
        sa.PrimaryKeyConstraint("proposal_id", name=op.f("pk_reviews")),
    )
    op.create_table(
        "backtests",
        sa.Column("id", sa.String(200), nullable=False),
        *_campaign_id("backtests"),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("proposal_ids", sa.JSON(), nullable=False),
        sa.Column("seeds", sa.JSON(), nullable=False),
        sa.Column("branch_steps", sa.Integer(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        _utc("created"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backtests")),
    )
    _index("backtests", "campaign_id")

    op.create_table(
        "branches",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("backtest_id", sa.String(200), nullable=False),
        sa.Column("proposal_id", sa.String(200), nullable=True),
        sa.Column("proposal_key", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("run_name", sa.String(300), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("eval_accuracy", sa.Float(), nullable=True),
        sa.Column("train_reward", sa.Float(), nullable=True),
        sa.Column("gate_passed", sa.Boolean(), nullable=True),
        sa.Column("gate_reasons", sa.JSON(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        _one_of("branches", "role", "control", "treatment"),
        _one_of("branches", "status", "finished", "failed"),
        sa.ForeignKeyConstraint(["backtest_id"], ["backtests.id"], name=op.f("fk_branches_backtest_id_backtests")),
        sa.ForeignKeyConstraint(["proposal_id"], ["proposals.id"], name=op.f("fk_branches_proposal_id_proposals")),
        sa.UniqueConstraint("backtest_id", "proposal_key", "role", "seed",
                            name=op.f("uq_branches_backtest_id_proposal_key_role_seed")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_branches")),
    )
    _index("branches", "backtest_id")

    op.create_table(
        "decisions",
        sa.Column("proposal_id", sa.String(200), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=True),
        sa.Column("gate_reasons", sa.JSON(), nullable=False),
        _utc("at"),
        _one_of("decisions", "outcome", "promote", "reject", "inconclusive", "blocked", "failed"),
        sa.ForeignKeyConstraint(["proposal_id"], ["proposals.id"], name=op.f("fk_decisions_proposal_id_proposals")),
        sa.PrimaryKeyConstraint("proposal_id", name=op.f("pk_decisions")),
    )
    op.create_table(
        "ledger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_campaign_id("ledger"),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("run_name", sa.String(300), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=False),
        _utc("at"),
        _one_of("ledger", "kind", "segment", "branch"),
        sa.UniqueConstraint("campaign_id", "key", name=op.f("uq_ledger_campaign_id_key")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger")),
    )
    _index("ledger", "campaign_id")

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *_campaign_id("events"),
        _utc("at"),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    _index("events", "campaign_id")


def downgrade() -> None:
    for table, indexed in [("events", ["campaign_id"]), ("ledger", ["campaign_id"]), ("decisions", []),
                           ("branches", ["backtest_id"]), ("backtests", ["campaign_id"]), ("reviews", []),
                           ("proposals", ["campaign_id", "symptom", "status"]),
                           ("findings", ["campaign_id", "symptom", "severity", "diagnostic"]),
                           ("policy_versions", ["campaign_id"]), ("harness_versions", []), ("campaigns", [])]:
        for c in indexed:
            op.drop_index(op.f(f"ix_{table}_{c}"), table_name=table)
        op.drop_table(table)
