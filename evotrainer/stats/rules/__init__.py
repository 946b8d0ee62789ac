"""The backtest's look rules, in the order they are tried (one file each; ``base.py`` says why)."""

from __future__ import annotations

from evotrainer.stats.rules.base import WAIT, Look, LookRule
from evotrainer.stats.rules.estimate import Estimate
from evotrainer.stats.rules.final import Final
from evotrainer.stats.rules.futility import Futility
from evotrainer.stats.rules.gate import Gate
from evotrainer.stats.rules.superiority import Superiority

LOOK_RULES: tuple[LookRule, ...] = (Gate(), Superiority(), Estimate(), Futility(), Final())
"""Gate first (an exploit is never promoted), then superiority, then the estimate at a look the budget made last, then
futility (interim looks), then the last look's reject / inconclusive."""

__all__ = ["LOOK_RULES", "WAIT", "Look", "LookRule"]
