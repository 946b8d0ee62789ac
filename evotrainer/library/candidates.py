"""Skills as brain candidates: each active, available skill resolved against the current harness.

Why here and not in the agent: the library knows what an intervention means (``set`` / ``scale`` / ``step``,
see ``changes.resolve_value``) and which ones the harness cannot express; the brains only need absolute,
validated values. A candidate that would change nothing, or leave the knob's bounds, or break a cross-knob
rule of this harness (``sync_ref_model`` needs ``beta > 0``) is dropped, as the catalog's ``resolve`` did.
Mistake notes are not candidates: use ``curation.known_mistake`` to check a change against them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from evotrainer.config.harness import HarnessSpec, locked_knob
from evotrainer.core.domain import Candidate, Finding
from evotrainer.core.errors import ConfigError
from evotrainer.library.changes import resolve_value
from evotrainer.library.format import Skill
from evotrainer.library.retrieve import Hit


def to_candidates(items: Iterable[Skill | Hit], harness: HarnessSpec, findings: Sequence[Finding] = ()) -> list[Candidate]:
    """Candidates (id = slug) for the skills or hits given, in the order given; ``effects`` are the held-out
    effects recorded in each skill's evidence (all campaigns that wrote to this library, this one included).

    A candidate answers the symptoms of its skill's triggers, less those whose conditions every present finding of
    that symptom fails: a trigger ``unusual_recipe`` when ``grpo.beta/above > 0`` does not make relaxing the KL
    anchor an answer to an unusual learning rate (a brain matches candidates to findings by symptom)."""
    knobs = harness.knobs()
    out: list[Candidate] = []
    for item in items:
        s = item.skill if isinstance(item, Hit) else item
        if s.kind != "skill" or not s.active or not s.intervention.available or locked_knob(s.intervention.knob):
            continue
        current = knobs.get(s.intervention.knob)
        value = resolve_value(s.intervention, current)
        if value is None or value == current or (isinstance(current, list) and list(value) == list(current)):
            continue
        try:
            harness.with_knob(s.intervention.knob, value)
        except ConfigError:
            continue
        symptoms = answered(s, findings)
        weights = {sym: max(t.weight for t in s.triggers if t.symptom == sym) for sym in symptoms}
        out.append(Candidate(id=s.slug, symptoms=symptoms, weights=weights, knob=s.intervention.knob, value=value,
                             description=s.description, source=s.source_text(), effects=_effects(s, value)))
    return out


def answered(skill: Skill, findings: Sequence[Finding]) -> list[str]:
    """The skill's trigger symptoms less those ruled out by the findings: a symptom present in ``findings`` counts
    only when some finding of it does not fail one of the trigger's conditions (a metric the finding lacks is
    unknown, not a failure)."""
    out = []
    for t in skill.triggers:
        present = [f for f in findings if f.symptom == t.symptom]
        if present and t.conditions and all(any(c.holds(f.metrics) is False for c in t.conditions) for f in present):
            continue
        out.append(t.symptom)
    return list(dict.fromkeys(out))


def same_value(a: Any, b: Any) -> bool:
    """Whether two knob values are the same move's value (numbers up to float noise, a list equal to a tuple)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
    return (list(a) if isinstance(a, (list, tuple)) else a) == (list(b) if isinstance(b, (list, tuple)) else b)


def _effects(s: Skill, value: Any) -> list[float]:
    """The skill's recorded effects that speak for this move. A relative skill (``scale``, ``step``) makes a
    different move from every starting point — ×3 from 3e-5 helped where ×3 from 9e-5 overshot — so when
    the library has tried this very value, only those backtests count; otherwise the skill's whole record
    does. A blocked branch scored higher through an exploit: its effect is no evidence for the skill."""
    usable = [e for e in s.evidence if e.effect is not None and e.outcome != "blocked"]
    same = [e for e in usable if e.value is not None and same_value(e.value, value)]
    return [e.effect for e in (same or usable)]
