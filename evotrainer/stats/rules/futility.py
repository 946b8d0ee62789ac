"""Futility at an interim look (non-binding: it can only lower the false-promotion rate). A proposal whose
``confidence`` interval, projected to the last look (its upper end scaled by looks / look with
``backtest.project_futility``: a change's effect builds up with the steps trained), lies wholly below the futility
threshold is rejected early; otherwise it waits for the next look. An unplanned last look (the budget ended the
backtest) is judged here too, as an interim one, and what is still open there is undecided."""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import WAIT, Look, LookRule


class Futility(LookRule):
    name = "futility"

    def at_look(self, look: Look) -> Decision | object | None:
        if look.planned_final:
            return None
        grow = look.looks / look.look if look.project_futility else 1.0  # steps at the last look / steps now
        upper = look.effect + look.half_futility
        if upper * grow < look.futile:
            projected = f"; at most {upper * grow:+.3f} by the last look, after {grow:.3g}× the steps" if grow != 1 else ""
            return look.decision("reject", f"futility: the {look.confidence:.0%} interval (up to {upper:+.3f}"
                                           f"{projected}) is wholly below {look.futile:+.3f}, a gain not worth having "
                                           "(stopped early)")
        if look.undecided is None and not look.last:
            return WAIT
        return look.decision(look.undecided or "inconclusive", f"undecided at look {look.look} of {look.looks}")
