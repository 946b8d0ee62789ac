"""Two nouns the store returns that ``evotrainer.agent.schemas`` does not define (yet): a backtest and a log event.

They follow the same rules as the schemas (pydantic, ``extra="forbid"``, no ORM behind them) and could
move there unchanged; they live here only so that this package stays self-contained.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.agent.schemas import BacktestStats


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
