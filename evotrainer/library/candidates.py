"""Skills as brain candidates: each active, available skill resolved against the current harness.

Why here and not in the agent: the library knows what an intervention means (``set`` / ``scale`` / ``step``,
see ``changes.resolve_value``) and which ones the harness cannot express; the brains only need absolute,
validated values. A candidate that would change nothing, or leave the knob's bounds, or break a cross-knob
rule of this harness (``sync_ref_model`` needs ``beta > 0``) is dropped, as the catalog's ``resolve`` did.
Mistake notes are not candidates: use ``curation.known_mistake`` to check a change against them.
"""

from __future__ import annotations

from collections.abc import Iterable

from evotrainer.agent.brains.base import Candidate
from evotrainer.config import HarnessSpec, locked_knob
from evotrainer.errors import ConfigError
from evotrainer.library.changes import resolve_value
from evotrainer.library.format import Skill
from evotrainer.library.retrieve import Hit


def to_candidates(items: Iterable[Skill | Hit], harness: HarnessSpec) -> list[Candidate]:
    """Candidates (id = slug) for the skills or hits given, in the order given; ``effects`` are the held-out
    effects recorded in each skill's evidence (all campaigns that wrote to this library, this one included)."""
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
        out.append(Candidate(id=s.slug, symptoms=s.symptoms, knob=s.intervention.knob, value=value,
                             description=s.description, source=s.source_text(),
                             # a blocked branch scored higher by an exploit: its effect is no evidence for the skill
                             effects=[e.effect for e in s.evidence if e.effect is not None and e.outcome != "blocked"]))
    return out
