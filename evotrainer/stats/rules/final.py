"""The planned last look, when no earlier rule decided: reject a change whose mean effect is not positive or whose
interval lies wholly below the futility threshold; call anything else inconclusive (the interval straddles
``min_effect``)."""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import Look, LookRule


class Final(LookRule):
    name = "final"

    def at_look(self, look: Look) -> Decision:
        if look.stats.effect <= 0 or look.effect + look.half_futility < look.futile:
            return look.decision("reject", f"no improvement beyond {look.futile:+.3f}")
        return look.decision("inconclusive", f"the interval straddles the minimum effect {look.min_effect:+.3f}")
