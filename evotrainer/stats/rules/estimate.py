"""The unplanned last look, decided on the estimate (``backtest.spent_estimate``).

When the campaign's budget, or its exploration share, has no room for a backtest's next look, nothing the campaign
does later can buy more evidence on what the backtest left open: the share is spent for every later round as well,
so an "inconclusive" change is never re-tested and the control goes on by default. That default is itself a
decision, and not the better one when the data lean the other way. With no more evidence to come, the choice
between two recipes that minimises the expected loss (linear, symmetric) is the one with the higher mean, the
posterior mean under a flat prior: so the treatment is promoted when its effect over the control is above
``min_effect`` and above 0, every gate passed and every treatment branch finished; otherwise this rule does not
apply, and futility rejects it or leaves it inconclusive.

What it costs: a change that does nothing is adopted about half the time at such a stop, and a harmful one whenever
its noisy estimate is positive. The first costs nothing in expectation; against the second, the gate rule ran
first (an exploit is never promoted) and the mainline's selection-split rollback (``agent/mainline.py``) undoes a
segment that falls. The false-promotion bound of superiority (α/2) does not hold for a promotion by this rule, which
is why it has its own name (decision rule ``estimate``) and can be switched off.
"""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import Look, LookRule


class Estimate(LookRule):
    name = "estimate"

    def at_look(self, look: Look) -> Decision | None:
        if not (look.last and not look.planned_final and look.by_estimate):
            return None
        st = look.stats
        if not (st.effect > max(look.min_effect, 0.0) and look.all_passed):
            return None
        return look.decision("promote", f"the budget ended the backtest at look {look.look} of {look.looks} and "
                                        "no later round can re-test it: adopted on its estimate, above the control's "
                                        "(backtest.spent_estimate)", stats=st.model_copy(update={"rule": "estimate"}))
