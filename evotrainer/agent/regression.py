"""Did the round's segment make the policy worse? The finding the campaign writes when it did, and what may act on it.

Why: a rollback (``mainline._keep_best``) puts the mainline back on its best earlier version, but the harness stays,
so the next segment and the backtest's control train the very recipe that just undid the policy. The diagnostics
read one run's rollouts, and on a wrecked policy they name the consequence, not the cause: agentic from its tuned
start at learning rate 3e-4 fell from 0.25 to 0.002 in 20 steps (bench/log/07-campaign-vs-static-baseline.md, 2026-11-27), and the only
finding at warning was ``too_hard`` (every group all wrong). The brain then backtested ``drop_all_wrong`` and the
leak trap, went back to the base policy three times and retrained the same recipe into the ground each time; on
another seed a segment that lost 8 points made it backtest a *higher* learning rate (×3: −0.32).

So the held-out fall itself is evidence, and trusted: the campaign's own selection-split scores, beyond the
rollback's noise margin. When this round's segment was rolled back, the diagnosis of the round carries a
``regression`` finding (critical, diagnostic :data:`DIAGNOSTIC`), which triggers the seed library's ``lower-lr``
skill, and the round backtests **only changes that make the update smaller** (``config.harness.STEP_SIZE_KNOBS``:
a lower learning rate), whichever brain drafted them — the mirror of a stuck round (``agent/movement.py``), where
only changes that enlarge it are. Why exclusive: the segment's other findings (``too_hard``, ``dead_groups``)
describe the policy the rollback discarded, not the version the mainline goes on from, so their remedies answer a
state the next branch will not start in; the one fact that holds for it is that this recipe's steps undid it. The
propose node's bracket then tries the same move further out beside it (×0.5 and ×1/32 for a learning rate), so one
backtest sees whether a halving suffices or the rate is decades off.

**The recipe's outliers are spared.** The restriction stands on the other findings describing the discarded policy;
the recipe check's (``unusual_recipe``, ``diagnostics/builtin/recipe.py``) describes the recipe, which the mainline
keeps after the rollback, so a remedy that answers it (a knob other than the step size moved back toward its normal
range, the training levels moved toward the scored ones) is as much a suspect of the fall as the step size, and is
backtested too, ahead of the smaller step (with two proposal slots, the remedy and its bracket take the round): a
recipe that trains on level 1 (arith [1, 1], scored on level 3) fell from 0.266 to 0.204 on the selection split in
its first 20 steps, and the smaller learning rate the round then promoted kept training the wrong levels
(bench/log/19-flaw-suite.md, 2026-12-03). Only a knob the check found at its warning distance is spared, and never a
step-size knob: that one still moves only smaller, whatever the recipe check says.

Only a segment's own rollback counts: a kept branch that is rolled back at a round's end is the control or the
promoted arm of a backtest, and its fall is already that backtest's evidence; if the recipe undoes the policy
again, the next round's segment shows it.
"""

from __future__ import annotations

from pydantic import ValidationError

from evotrainer.agent.state import CampaignContext, segment_id
from evotrainer.config.harness import STEP_SIZE_KNOBS, HarnessSpec
from evotrainer.core.domain import Candidate, Finding
from evotrainer.diagnostics.builtin.recipe import UnusualRecipe
from evotrainer.library.changes import direction

DIAGNOSTIC = "rollback"  # the finding's diagnostic: the campaign's own comparison of versions, not a registry entry
VERSION = "1"
SYMPTOM = "regression"


def regression_finding(ctx: CampaignContext, rnd: int) -> Finding | None:
    """The ``regression`` finding of round ``rnd`` when its segment was rolled back (its ``regression_rollback``
    event, written before the round is diagnosed), else None."""
    seg = segment_id(ctx.campaign_id, rnd)
    event = next((e.message for e in ctx.store.events(ctx.campaign_id, kind="regression_rollback")
                  if e.message.get("from") == seg), None)
    if event is None:
        return None
    fell, best, margin = float(event["from_accuracy"]), float(event["to_accuracy"]), float(event["margin"])
    drop = best - fell
    split = event.get("split", "selection")
    return Finding(
        symptom=SYMPTOM, diagnostic=DIAGNOSTIC, version=VERSION, severity="critical",
        # beyond the margin by construction; twice the margin or more is as sure as this comparison gets
        confidence=round(min(1.0, drop / (2 * margin)), 3) if margin > 0 else 1.0,
        metrics={"accuracy": round(fell, 6), "best_accuracy": round(best, 6), "drop": round(drop, 6),
                 "margin": round(margin, 6)},
        explanation=f"This segment's {split}-split accuracy {fell:.3f} is {drop:.3f} below {event['to']} "
                    f"({best:.3f}), beyond the rollback margin {margin:.3f}, so the mainline went back to it. "
                    "The harness stays, so training the same recipe from there is likely to undo it again: take "
                    "smaller steps (lower the learning rate) rather than larger ones.")


def recipe_remedies(candidates: list[Candidate], findings: list[Finding], harness: HarnessSpec) -> dict[str, str]:
    """{knob: direction} of the candidates that move a knob the recipe check found at warning distance or beyond
    (its own ``<knob>/above`` or ``/below`` metric, not only the finding's worst), step-size knobs excepted (see the
    module docstring): a draft moving such a knob that way may act in a regressed round."""
    override = harness.diagnostics.params.get(UnusualRecipe.name) or {}
    try:
        warning = UnusualRecipe.Params(**override).warning
    except ValidationError:  # the harness was validated with it; a revised parameter set is the registry's to refuse
        warning = UnusualRecipe.Params().warning
    far = {key.rsplit("/", 1)[0] for f in findings if f.symptom == UnusualRecipe.symptom and f.severity != "info"
           for key, v in f.metrics.items() if key.endswith(("/above", "/below")) and v >= warning}
    knobs = harness.knobs()
    return {c.knob: direction(knobs.get(c.knob), c.value) for c in candidates
            if UnusualRecipe.symptom in c.symptoms and c.knob in far and c.knob not in STEP_SIZE_KNOBS}


def regressed(findings: list[Finding]) -> bool:
    """Whether a round's findings say its segment made the policy worse (see the module docstring)."""
    return any(f.symptom == SYMPTOM and f.diagnostic == DIAGNOSTIC for f in findings)


# what a brain is told in a regressed round (the LLM prompt's line above its knob list)
REGRESSED_WHY = ("the mainline regressed (its last segment's held-out accuracy fell below an earlier version's beyond "
                 "noise, and it went back to that version; that segment's other findings describe the discarded "
                 "policy): only a change that makes the update smaller keeps the same recipe from undoing it again "
                 "(lower optim.learning_rate), or one that moves a knob the recipe check found outside its normal "
                 "range back toward it")
