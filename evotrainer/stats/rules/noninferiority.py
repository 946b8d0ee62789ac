"""Non-inferiority in a stuck round (``backtest.stuck_margin``; module docstring of ``evotrainer.stats.backtest``):
at the final look, a change that makes a stuck policy move is promoted when the interval rules out a loss beyond the
margin with a positive point estimate, every gate passed and every treatment branch finished (the weaker rule cannot
stand on the pairs a diverged raise left). A margin of None switches the rule off."""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import Look, LookRule


class NonInferiority(LookRule):
    name = "non_inferiority"

    def at_look(self, look: Look) -> Decision | None:
        st, margin = look.stats, look.noninferior
        if not (look.final and margin is not None and look.moves and st.effect > 0 and st.ci_low > -margin
                and look.all_passed):
            return None
        return look.decision("promote", f"non-inferior in a stuck round: the control's answers do not move, the "
                                        f"treatment's do, and the interval rules out a loss beyond {margin:.3f} "
                                        "(backtest.stuck_margin)", stats=st.model_copy(update={"rule": "non_inferiority"}))
