"""The recipe read before the evidence: knobs outside the range practitioners run (``unusual_recipe``).

Why a diagnostic: an expert reads the recipe first, and a KL coefficient of 0.3, a group of 2 or a learning rate
ten times what the model class trains at is a hypothesis worth a backtest before any step says so. Putting it
among the diagnostics makes it a finding like the others (stored, shown, revisable through ``diagnostics.params``),
and the library answers it like any symptom: each skill that moves a knob back says, in its trigger's conditions,
which outlier it answers (``grpo.beta/above > 0`` for relaxing the KL anchor). It never stands in for evidence: a
subtle flaw lies inside the normal range and is left to the diagnostics of the training signal.

The recipe is the run's own record (``meta.json``'s harness, our runs only); evidence from other tools carries no
recipe, and the diagnostic says it had not enough evidence. The normal ranges, with their sources, are :mod:`evotrainer.config.ranges`.

One range depends on the task, not the field: the training levels (``data.difficulty``). Practitioners train on the
levels the policy is scored on or one around them (curriculum learning steps one level at a time); a recipe that
trains two or more levels away from its held-out split's levels learns something else than what it is scored on
(metrics ``data.difficulty/above`` / ``below``: the levels beyond that band). It is read only for a built-in task,
whose default level is a class attribute: nothing a run's record names is imported to read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evotrainer.config.harness import HarnessSpec
from evotrainer.config.ranges import NORMAL
from evotrainer.core.domain import Finding
from evotrainer.diagnostics.base import Diagnostic, examples_from, need
from evotrainer.evidence.model import Evidence
from evotrainer.tasks import BUILTIN_TASKS

LEVEL_BAND = 1  # levels either side of the scored ones that practitioners train on (module docstring)


def level_gap(meta: dict, spec: HarnessSpec) -> tuple[str, int] | None:
    """("above" | "below", levels beyond :data:`LEVEL_BAND`) when the recipe trains that far from the levels its
    held-out split is scored on; None when it is within the band, or when the record does not say (a user's task
    with either range unset, or a malformed record: untrusted bytes are read, never trusted)."""
    try:
        job = meta.get("spec")
        job = job if isinstance(job, dict) else {}
        name, scored = job.get("task"), (job.get("eval") or {}).get("difficulty")
        cls = BUILTIN_TASKS.get(name) if isinstance(name, str) else None
        default = (cls.default_difficulty,) * 2 if cls is not None else None
        (lo, hi), (elo, ehi) = spec.data.difficulty or default, scored or default
        lo, hi, elo, ehi = (int(x) for x in (lo, hi, elo, ehi))
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None
    if lo - ehi > LEVEL_BAND:
        return "above", lo - ehi - LEVEL_BAND
    if elo - hi > LEVEL_BAND:
        return "below", elo - hi - LEVEL_BAND
    return None


class RecipeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warning: float = Field(0.5, ge=0.0, le=1000.0,
                           description="How far outside its normal range a knob must lie to be a warning, as the ratio "
                                       "beyond the range's nearer end minus one (0.5: half as far again as the end; "
                                       "config/ranges.py NormalRange.distance); nearer outliers are info.")


class UnusualRecipe(Diagnostic):
    name = "unusual_recipe"
    version = "2"  # v2: the training levels against the scored ones (module docstring)
    symptom = "unusual_recipe"
    signal = ("The run's recipe (its job record's harness) against each knob's normal range (evotrainer harness "
              "knobs): every knob outside it, with how far (metrics '<knob>/above' / '<knob>/below'); and the "
              "training levels against the levels the held-out split is scored on, in levels beyond one either side "
              "('data.difficulty/above' / 'data.difficulty/below').")
    literature = ("The ranges' sources are listed with each knob (TRL's GRPOConfig defaults, DeepSeekMath, DAPO, "
                  "Dr. GRPO, Skywork-OR1, open-r1).")
    Params = RecipeParams
    needs = (need("the run's recipe", "meta:harness",
                  supply="our jobs record it in meta.json; a run from another tool carries no recipe to read"),)
    reads = ("meta:spec",)  # the job's task and scored levels, for the training levels' gap (level_gap)

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
        gap = None if "data.difficulty" in inert else level_gap(ev.meta if isinstance(ev.meta, dict) else {}, spec)
        for side in ("above", "below"):
            metrics[f"data.difficulty/{side}"] = float(gap[1]) if gap and gap[0] == side else 0.0
        if gap:
            trained = list(spec.data.difficulty) if spec.data.difficulty else "unset (the task's default)"
            words.append(f"data.difficulty = {trained} trains {gap[1] + LEVEL_BAND} levels "
                         f"{gap[0]} the levels its held-out split is scored on (practitioners train on those or one "
                         "around them: curriculum learning steps one level at a time)")
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
