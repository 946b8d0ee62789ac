"""Superiority: promote when the look's efficacy interval (alpha spending, ``evotrainer.stats.backtest``) lies above
``min_effect``; at an interim look where a gate could not decide yet on so few steps, wait for the next look."""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import WAIT, Look, LookRule


class Superiority(LookRule):
    name = "superiority"

    def at_look(self, look: Look) -> Decision | object | None:
        if not look.stats.ci_low > look.min_effect:
            return None
        if any(look.treat[s].gate_passed is None for s in look.seeds) and not look.planned_final:
            if look.undecided is None and not look.last:
                return WAIT  # promotable, but a gate could not decide yet on so few steps
            return look.decision(look.undecided or "inconclusive",
                                 f"undecided at look {look.look} of {look.looks}: a gate had too little evidence yet")
        ending = (" (stopped early)" if not look.final else
                  " (the backtest's last look: it spent the error earlier looks left)" if look.last
                  and not look.planned_final else "")
        return look.decision("promote", f"the whole interval is above the minimum effect {look.min_effect:+.3f}"
                             + ending)
