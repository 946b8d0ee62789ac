"""The built-in step-size draft of a stuck or regressed round whose brain drafted none.

Why: a stuck round (``agent/movement.py``) backtests only changes that enlarge the update, a regressed one
(``agent/regression.py``) only changes that shrink it, and both used to rely on the library to supply one: the seed
library's ``raise-lr`` and ``lower-lr`` skills. A user's own library may lack them (or a domain filter may hide
them); the round then proposed nothing, and the mainline went on training the very recipe that changes nothing or
that just undid the policy. The fact both rules stand on — this step size is wrong, and in which direction — does
not depend on the library, so neither does the remedy. It is used only when the library offers no change in that
direction and the brain drafted none: a brain that declined an offered one (its evidence says the move does not
pay, or the value was refuted) is not overruled.

The draft scales the learning rate the way the seed skills do (×3 up, ×0.5 down); the propose node's bracket then
tries the same move further out beside it, as for any draft. A value this campaign already refuted is skipped for
the next power of the same factor (×9, ×0.25, …), up to :data:`MAX_POWER`; one the harness's bounds refuse ends the
search. Cited as no skill: the outcome is still distilled into the library like any decision's.
"""

from __future__ import annotations

from typing import Any, Literal

from evotrainer.agent.brains.base import RefutedChange
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import Hypothesis, ProposalDraft
from evotrainer.core.errors import ConfigError
from evotrainer.core.symptoms import SYMPTOMS
from evotrainer.library.candidates import same_value
from evotrainer.library.changes import resolve_value
from evotrainer.library.format import Intervention

KNOB = "optim.learning_rate"
FACTOR: dict[str, float] = {"larger": 3.0, "smaller": 0.5}  # the seed library's raise-lr and lower-lr
SYMPTOM: dict[str, str] = {"larger": "plateau", "smaller": "regression"}
MAX_POWER = 3  # ×3, ×9, ×27 (or ×0.5, ×0.25, ×0.125): further than that, the bracket already reached
BRAIN = "built-in"  # the ``brain`` of the proposals made from this draft: not the configured brain's
RATIONALE = f"{BRAIN} step-size draft"


def _refuted(value: Any, refuted: list[RefutedChange]) -> bool:
    return any(r.knob == KNOB and same_value(r.value, value) for r in refuted)


def step_draft(harness: HarnessSpec, step: Literal["larger", "smaller"],
               refuted: list[RefutedChange]) -> ProposalDraft | None:
    """The learning-rate draft that makes the update ``step`` (see the module docstring), or None when every
    power up to :data:`MAX_POWER` was refuted or leaves the knob's bounds."""
    current = harness.knobs().get(KNOB)
    if not isinstance(current, (int, float)) or isinstance(current, bool) or current <= 0:
        return None
    for power in range(1, MAX_POWER + 1):
        factor = FACTOR[step] ** power
        value = resolve_value(Intervention(knob=KNOB, op="scale", arg=factor), current)
        try:
            harness.with_knob(KNOB, value)
        except ConfigError:
            return None
        if _refuted(value, refuted):
            continue
        symptom = SYMPTOM[step]
        why = ("the mainline's answers did not move in its segment, so only a larger step can act on it"
               if step == "larger" else "the round's segment undid the policy and was rolled back, so the same step "
               "would undo it again")
        return ProposalDraft(
            knob=KNOB, value=value,
            hypothesis=Hypothesis(symptom=symptom, cause=SYMPTOMS[symptom].cause[:600],
                                  change=f"scale the learning rate ×{factor:g} ({KNOB}: {current!r} → {value!r})",
                                  expected_effect="held-out accuracy up against a control that keeps the current step"),
            rationale=f"{RATIONALE}: {why}; no draft of the brain changed the step size"
                      + (f" (×{FACTOR[step]:g} to ×{FACTOR[step] ** (power - 1):g} already refuted)" if power > 1 else ""),
            cited_skills=[], prior=None)
    return None
