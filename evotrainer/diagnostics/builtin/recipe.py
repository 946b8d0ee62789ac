"""The recipe read before the evidence: knobs outside the range practitioners run (``unusual_recipe``).

Why a diagnostic: an expert reads the recipe first, and a KL coefficient of 0.3, a group of 2 or a learning rate
ten times what the model class trains at is a hypothesis worth a backtest before any step says so. Putting it
among the diagnostics makes it a finding like the others (stored, shown, revisable through ``diagnostics.params``),
and the library answers it like any symptom: each skill that moves a knob back says, in its trigger's conditions,
which outlier it answers (``grpo.beta/above > 0`` for relaxing the KL anchor). It never stands in for evidence: a
subtle flaw lies inside the normal range and is left to the diagnostics of the training signal.

The recipe is the run's own record (``meta.json``'s harness, our runs only); evidence from other tools carries no
recipe, and the diagnostic says it had not enough evidence. The normal ranges, with their sources, are :mod:`evotrainer.config.ranges`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evotrainer.config.harness import HarnessSpec
from evotrainer.config.ranges import NORMAL
from evotrainer.core.domain import Finding
from evotrainer.diagnostics.base import Diagnostic, examples_from, need
from evotrainer.evidence.model import Evidence


class RecipeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warning: float = Field(0.5, ge=0.0, le=1000.0,
                           description="How far outside its normal range a knob must lie to be a warning, as the ratio "
                                       "beyond the range's nearer end minus one (0.5: half as far again as the end; "
                                       "config/ranges.py NormalRange.distance); nearer outliers are info.")


class UnusualRecipe(Diagnostic):
    name = "unusual_recipe"
    symptom = "unusual_recipe"
    signal = ("The run's recipe (its job record's harness) against each knob's normal range (evotrainer harness "
              "knobs): every knob outside it, with how far (metrics '<knob>/above' / '<knob>/below').")
    literature = ("The ranges' sources are listed with each knob (TRL's GRPOConfig defaults, DeepSeekMath, DAPO, "
                  "Dr. GRPO, Skywork-OR1, open-r1).")
    Params = RecipeParams
    needs = (need("the run's recipe", "meta:harness",
                  supply="our jobs record it in meta.json; a run from another tool carries no recipe to read"),)

    def analyze(self, ev: Evidence) -> list[Finding]:
        try:
            spec = HarnessSpec.model_validate(ev.meta["harness"])
        except ValidationError as err:
            return [self.finding("info", f"the run's recipe is not a valid harness ({err.error_count()} problems): "
                                 "nothing to compare", confidence=0.0)]
        knobs, inert = spec.knobs(), spec.inert_knobs()
        # every knob's distance on both sides, 0 where it is usual: a skill's condition on one knob is then decided
        # (a metric the finding lacked would leave it unknown, and the skill would answer every outlier)
        metrics: dict[str, float] = {}
        words: list[str] = []
        for knob, usual in NORMAL.items():
            value = knobs.get(knob)
            far = 0.0 if knob in inert or value is None or usual.contains(value) else usual.distance(value)
            side = "below" if far and usual.values is None and value < usual.low else "above"
            metrics[f"{knob}/above"] = min(far, 1e6) if side == "above" else 0.0
            metrics[f"{knob}/below"] = min(far, 1e6) if side == "below" else 0.0
            if far > 0:
                words.append(f"{knob} = {value!r} is {side} its normal range {usual.describe()} ({usual.source})")
        if not words:
            return []
        worst = max(metrics.values())
        severity = "warning" if worst >= self.params.warning else "info"
        steps = None  # the recipe held for the whole run
        if "step" in ev.metrics and ev.metrics["step"].notna().any():
            steps = (int(ev.metrics["step"].min()), int(ev.metrics["step"].max()))
        last = ev.rollouts[ev.rollouts["step"] == ev.rollouts["step"].max()] if "step" in ev.rollouts else ev.rollouts
        return [self.finding(severity, "the recipe sets " + "; ".join(words) + ". A value outside what practitioners "
                             "run is a hypothesis to backtest, not a verdict.", confidence=0.6, metrics=metrics,
                             steps=steps, examples=examples_from(last))]
