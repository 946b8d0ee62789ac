"""What a look rule sees and returns: one proposal's branches at one look, its interval computed once, and the rule's
verdict (a ``Decision``, ``WAIT`` for the next look, or None when the rule does not apply).

Why rules, one file each (in the style of Optuna's ``pruners/``): the backtest's decision is a chain of rules tried
in order (``evotrainer.stats.rules.LOOK_RULES``), each small enough to read on its own and each with the reason it
exists; ``evotrainer.stats.backtest.decide`` builds the ``Look`` and asks them in turn. A campaign's settings switch a
rule off by leaving its input unset (``backtest.spent_estimate`` false: no estimate rule), and the flaw suite's
ablations do the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime

from evotrainer.core.domain import BacktestStats, BranchResult, Decision

WAIT = object()
"""A rule's verdict "undecided at this look: wait for the next one" (``decide`` returns None)."""


@dataclass
class Look:
    """One proposal's branches at one look, with what every rule reads."""

    proposal_id: str
    look: int
    looks: int
    planned_final: bool  # the look is the backtest's last planned one
    final: bool  # the planned last look, or the one the budget made last (``last``)
    last: bool  # the backtest ends here for a reason outside this proposal's data
    min_effect: float
    futile: float  # the futility threshold (``futility_effect``, else ``min_effect``)
    confidence: float
    project_futility: bool
    undecided: str | None  # the outcome to give instead of waiting when the backtest ends here for another reason
    by_estimate: bool  # a look the budget made last is decided on the estimate (backtest.spent_estimate)
    treatment: list[BranchResult]  # every treatment branch, finished or not
    treat: dict[int, BranchResult]  # finished treatment branches by seed
    seeds: list[int]  # the paired seeds
    stats: BacktestStats
    effect: float
    half_futility: float  # the half-width of the ``confidence`` interval (futility is judged on it)
    gate_reasons: list[str]
    train_gain: float | None  # treatment − control training reward, mean over the pairs
    reasons: list[str] = field(default_factory=list)
    at: datetime | None = None

    @property
    def all_passed(self) -> bool:
        """Every treatment branch finished, and every one passed its gate: a weaker rule than superiority stands on
        no fewer pairs than were trained, and never on an exploit."""
        return len(self.treat) == len(self.treatment) and all(self.treat[s].gate_passed for s in self.seeds)

    def decision(self, outcome: str, why: str, stats: BacktestStats | None = None) -> Decision:
        return Decision(proposal_id=self.proposal_id, outcome=outcome, reasons=[*self.reasons, why],
                        stats=stats or self.stats, gate_reasons=self.gate_reasons, at=self.at)


class LookRule(ABC):
    """One rule of the backtest's decision, tried in ``LOOK_RULES``'s order."""

    name: str

    @abstractmethod
    def at_look(self, look: Look) -> Decision | object | None:
        """The decision, ``WAIT`` (undecided: the next look), or None (the rule does not apply: ask the next)."""
