"""Nouns the store returns that ``evotrainer.core.domain`` does not define (yet): a backtest, a log event,
the skill-library index (what was indexed, what a re-sync changed, a text-search match), a lease just taken
and a recorded process.

They follow the same rules as the schemas (pydantic, ``extra="forbid"``, no ORM behind them) and could
move there unchanged; they live here only so that this package stays self-contained.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.core.domain import BacktestStats, CampaignOwner, SkillKind, SkillStatus


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Backtest(_Model):
    """One backtest: the proposals it tests, the seeds, the steps per branch, and per-proposal statistics."""

    id: str
    campaign_id: str
    round: int
    proposal_ids: list[str]
    seeds: list[int]
    branch_steps: int
    stats: dict[str, BacktestStats] = Field(default_factory=dict, description="Proposal id -> paired statistics.")
    created: datetime


class Event(_Model):
    """One line of a campaign's history (``campaign status``): what happened, when, with details."""

    id: int
    campaign_id: str
    at: datetime
    kind: str
    message: dict[str, Any]


class SkillDoc(_Model):
    """What the library hands the index for one SKILL.md file (``evotrainer.library.index`` builds it)."""

    slug: str
    kind: SkillKind
    status: SkillStatus
    name: str
    description: str
    version: int
    path: str = Field(..., description="The file, relative to the library folder.")
    content_hash: str = Field(..., description="sha256 of the file's bytes: a different hash means the file changed.")
    symptoms: list[str]
    knob: str
    available: bool
    body: str
    front_matter: dict[str, Any]


class IndexedSkill(SkillDoc):
    """A skill as the index last saw it; ``removed`` is set when its file disappeared (the row is kept)."""

    library: str
    indexed: datetime = Field(..., description="When this content was indexed (the last add or change).")
    removed: datetime | None = None


class SkillSync(_Model):
    """What one re-sync of a library did, by slug."""

    library: str
    added: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list, description="Content changed, or a removed file came back.")
    removed: list[str] = Field(default_factory=list, description="Files gone since the last sync (rows marked, kept).")
    unchanged: list[str] = Field(default_factory=list)


class SkillMatch(_Model):
    """A text-search hit: larger ``score`` = more relevant (BM25, from FTS5 or the pure-Python fallback)."""

    slug: str
    score: float


class Lease(_Model):
    """A lease just taken: the token that renews and releases it, and the owner it replaced, if any."""

    campaign_id: str
    token: str = Field(..., description="Identifies this holding: only its holder can renew or release it.")
    owner: CampaignOwner
    took_over: CampaignOwner | None = Field(None, description="The previous holder whose owner was gone.")
    reason: str | None = Field(None, description="Why the previous holder was taken to be gone.")


class RecordedProcess(_Model):
    """A process a campaign's owner started (a pool worker), recorded so a later owner can end it."""

    id: int
    campaign_id: str
    host: str
    pid: int
    started: float = Field(..., description="Start time (epoch seconds): with the pid, identifies the process.")
    role: str
    recorded: datetime
