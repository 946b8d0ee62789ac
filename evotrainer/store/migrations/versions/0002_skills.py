"""The skill-library index: one row per SKILL.md file per library folder, and (SQLite only) its FTS5 index.

The ``skills`` table mirrors the files (which stay the source of truth): what ``skills search``, retrieval and
``skills history`` read. On SQLite a full-text table ``skills_fts`` (porter stemming, rowid = ``skills.id``)
is created here and kept in step by ``Store.sync_skills``; other databases have no FTS5 and the store ranks
with a pure-Python BM25 instead. The CHECK lists are literal copies of ``SkillKind`` / ``SkillStatus`` in
``evotrainer.library.format`` as of this revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "skills",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("library", sa.String(1000), nullable=False),
        sa.Column("slug", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("symptoms", sa.JSON(), nullable=False),
        sa.Column("knob", sa.String(200), nullable=False),
        sa.Column("available", sa.Boolean(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("front_matter", sa.JSON(), nullable=False),
        sa.Column("indexed", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('skill', 'mistake')", name=op.f("ck_skills_kind")),
        sa.CheckConstraint("status IN ('active', 'deprecated')", name=op.f("ck_skills_status")),
        sa.UniqueConstraint("library", "slug", name=op.f("uq_skills_library_slug")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_skills")),
    )
    op.create_index(op.f("ix_skills_slug"), "skills", ["slug"], unique=False)
    if op.get_bind().dialect.name == "sqlite":
        op.execute("CREATE VIRTUAL TABLE skills_fts USING fts5(name, description, body, keywords, "
                   "tokenize = 'porter unicode61')")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS skills_fts")
    op.drop_index(op.f("ix_skills_slug"), table_name="skills")
    op.drop_table("skills")
