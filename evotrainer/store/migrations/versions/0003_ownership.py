"""One owner per campaign: the lease (who runs the campaign now, with a heartbeat) and the processes it started.

``campaign_leases`` holds at most one row per campaign; ``Store.acquire_lease`` takes it in one transaction
(the campaign's row is locked first on databases that support ``SELECT … FOR UPDATE``; SQLite serialises
writers anyway), taking over a lease whose owner is gone. ``campaign_processes`` records the owner's pool
workers by (host, pid, start time) so that a later owner ends any that outlived theirs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "campaign_leases",
        sa.Column("campaign_id", sa.String(200), nullable=False),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("acquired", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"], name=op.f("fk_campaign_leases_campaign_id_campaigns")),
        sa.PrimaryKeyConstraint("campaign_id", name=op.f("pk_campaign_leases")),
    )
    op.create_table(
        "campaign_processes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("campaign_id", sa.String(200), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("recorded", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"],
                                name=op.f("fk_campaign_processes_campaign_id_campaigns")),
        sa.UniqueConstraint("campaign_id", "host", "pid", "started",
                            name=op.f("uq_campaign_processes_campaign_id_host_pid_started")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaign_processes")),
    )
    op.create_index(op.f("ix_campaign_processes_campaign_id"), "campaign_processes", ["campaign_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_campaign_processes_campaign_id"), table_name="campaign_processes")
    op.drop_table("campaign_processes")
    op.drop_table("campaign_leases")
