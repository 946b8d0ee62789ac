"""The gate comes first: a treatment branch that tripped a diagnostic gate is never promoted, whatever it scored.

When the treatment scored higher anyway (on the held-out split, or on the training reward the change optimised) the
outcome is ``blocked``: a high score reached by an exploit (a leaking tool, a reward on visible tests) must be kept
out, and the record says it was blocked, not merely unhelpful. Otherwise it is rejected. A trip stops the proposal
at the look it shows up.
"""

from __future__ import annotations

from evotrainer.core.domain import Decision
from evotrainer.stats.rules.base import Look, LookRule


class Gate(LookRule):
    name = "gate"

    def at_look(self, look: Look) -> Decision | None:
        if not look.gate_reasons:
            return None
        gain = look.train_gain
        if look.stats.effect > 0 or (gain is not None and gain > 0):
            higher = "held-out accuracy" if look.stats.effect > 0 else f"training reward ({gain:+.3f})"
            return look.decision("blocked", f"treatment scored higher ({higher}) but tripped the gate")
        return look.decision("reject", "treatment tripped the gate and did not score higher")
