"""Sequential backtests, the kept branch and screening.

- ``branches.step`` / ``branches.looks``: a branch is evaluated at several looks and may stop at any of them
  (``looks`` holds step, held-out accuracy and training reward per look; ``step`` the last one).
- ``branches.selection_accuracy`` and ``policy_versions.selection_accuracy``: accuracy on the selection
  split, on which the mainline chooses the branch it continues from and the version it rolls back to.
- ``screened``: a new decision outcome and proposal status, for a change whose predicted effect on the
  training signal (re-scored from the last segment's rollouts) is nil, so it was not backtested.

The CHECK lists are literal copies of ``Outcome`` / ``ProposalStatus`` as of this revision.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

OLD_OUTCOMES = ("promote", "reject", "inconclusive", "blocked", "failed")
OLD_STATUSES = ("pending_review", "approved", "rejected", "backtesting", "promoted", "refuted", "inconclusive",
                "blocked", "failed", "skipped_budget")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _checks(outcomes: tuple[str, ...], statuses: tuple[str, ...]) -> None:
    with op.batch_alter_table("decisions") as b:
        b.drop_constraint(op.f("ck_decisions_outcome"), type_="check")
        b.create_check_constraint(op.f("ck_decisions_outcome"), _in("outcome", outcomes))
    with op.batch_alter_table("proposals") as b:
        b.drop_constraint(op.f("ck_proposals_status"), type_="check")
        b.create_check_constraint(op.f("ck_proposals_status"), _in("status", statuses))


def upgrade() -> None:
    with op.batch_alter_table("branches") as b:
        b.add_column(sa.Column("step", sa.Integer(), nullable=True))
        b.add_column(sa.Column("looks", sa.JSON(), nullable=True))
        b.add_column(sa.Column("selection_accuracy", sa.Float(), nullable=True))
    with op.batch_alter_table("policy_versions") as b:
        b.add_column(sa.Column("selection_accuracy", sa.Float(), nullable=True))
    _checks(OLD_OUTCOMES + ("screened",), OLD_STATUSES + ("screened",))


def downgrade() -> None:
    _checks(OLD_OUTCOMES, OLD_STATUSES)
    with op.batch_alter_table("policy_versions") as b:
        b.drop_column("selection_accuracy")
    with op.batch_alter_table("branches") as b:
        b.drop_column("selection_accuracy")
        b.drop_column("looks")
        b.drop_column("step")
