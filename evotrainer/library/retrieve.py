"""Retrieval: which skills and mistake notes bear on these findings, ranked with the reasons shown.

A hit's score is the sum of three parts, each kept on the ``Hit`` so a person (or the LLM brain's prompt) can
see why a lesson came up:

* **trigger** — for each symptom present, the best matching trigger: finding severity weight (info 0.25,
  warning 0.6, critical 1) × finding confidence × trigger weight; a trigger whose metric condition fails does
  not fire, an unknown metric halves it, a domain outside the trigger's list halves it. Summed over symptoms,
  so a lesson that answers two present symptoms outranks one that answers one.
* **text** — BM25 relevance (SQLite FTS5 through the store index, else pure Python) of the findings' symptom
  descriptions and explanations to the entry's name, description and body, scaled to [0, 1] × 0.35.
* **evidence** — what our backtests said, in [-1, 1] × 0.3: helpful vs harmful counters (a Beta(1, 1)
  posterior mean moved to [-1, 1]) and the mean held-out effect (tanh(effect / 0.05), shrunk by n/(n+2);
  a mistake note counts a negative effect as support).

An intervention the harness cannot express yet scores half (it is shown, never proposed); deprecated entries
are left out unless asked for, and then rank after every active one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from evotrainer.core.domain import Finding
from evotrainer.core.symptoms import SYMPTOMS
from evotrainer.library.format import Skill
from evotrainer.library.index import text_scores

if TYPE_CHECKING:
    from evotrainer.library.loader import Library
    from evotrainer.store import Store

SEVERITY_WEIGHT = {"info": 0.25, "warning": 0.6, "critical": 1.0}
W_TEXT = 0.35
W_EVIDENCE = 0.3
UNAVAILABLE = 0.5
UNKNOWN_CONDITION = 0.5
DOMAIN_MISMATCH = 0.5
EFFECT_SCALE = 0.05  # a held-out effect of 5 points counts as strong (tanh(1) ≈ 0.76)

# Built-in tasks → the domain their lessons transfer within; a user task is its own domain.
TASK_DOMAINS = {"arith": "math", "countdown": "math", "code": "code", "agentic": "agentic"}


def domain_of(task: str) -> str:
    return TASK_DOMAINS.get(task, task.split(":")[-1].lower())


class HitSummary(BaseModel):
    """One retrieved entry's score and the parts it is made of (``evotrainer library search --json`` prints these)."""

    model_config = ConfigDict(extra="forbid")

    slug: str
    kind: str
    name: str
    description: str
    status: str
    available: bool
    score: float
    trigger: float
    text: float
    evidence: float
    matched: list[str]


class Hit(HitSummary):
    """One retrieved entry with its score, and the skill itself."""

    skill: Skill

    def explain(self) -> str:
        parts = [f"trigger {self.trigger:.2f}" + (f" [{'; '.join(self.matched)}]" if self.matched else ""),
                 f"text {self.text:.2f}×{W_TEXT}", f"evidence {self.evidence:+.2f}×{W_EVIDENCE}"]
        tail = "" if self.available else f", ×{UNAVAILABLE} unavailable"
        return f"{self.score:.3f} = ({' + '.join(parts)}){tail}"


def trigger_score(skill: Skill, findings: Sequence[Finding], domain: str | None = None) -> tuple[float, list[str]]:
    """The trigger part and, per symptom matched, a short reason."""
    best: dict[str, tuple[float, str]] = {}
    for f in findings:
        for t in skill.triggers:
            if t.symptom != f.symptom:
                continue
            held = [c.holds(f.metrics) for c in t.conditions]
            if any(h is False for h in held):
                continue
            w = SEVERITY_WEIGHT[f.severity] * f.confidence * t.weight
            w *= UNKNOWN_CONDITION ** sum(h is None for h in held)
            if domain and t.domains and domain not in t.domains:
                w *= DOMAIN_MISMATCH
            if w > best.get(f.symptom, (0.0, ""))[0]:
                best[f.symptom] = (w, f"{f.symptom} {f.severity} conf {f.confidence:.2f}")
    return sum(w for w, _ in best.values()), [why for _, why in best.values()]


def evidence_score(skill: Skill) -> float:
    """Support from our backtests in [-1, 1]; 0 when there is none."""
    c = skill.counters
    n = c.helpful + c.harmful
    counters = 2 * (c.helpful + 1) / (n + 2) - 1
    effects = [e.effect for e in skill.evidence if e.effect is not None]
    effect = 0.0
    if effects:
        mean = sum(effects) / len(effects)
        sign = 1.0 if skill.kind == "skill" else -1.0
        effect = math.tanh(sign * mean / EFFECT_SCALE) * len(effects) / (len(effects) + 2)
    return round(0.5 * counters + 0.5 * effect, 6)


def query_of(findings: Sequence[Finding]) -> str:
    """The text a set of findings is searched with: each symptom's name, description and explanation."""
    parts = []
    for f in findings:
        parts += [f.symptom.replace("_", " "), SYMPTOMS[f.symptom].description if f.symptom in SYMPTOMS else "", f.explanation]
    return " ".join(parts)


def _hit(skill: Skill, trigger: float, matched: list[str], text: float) -> Hit:
    ev = evidence_score(skill)
    score = (trigger + W_TEXT * text + W_EVIDENCE * ev) * (1.0 if skill.intervention.available else UNAVAILABLE)
    return Hit(slug=skill.slug, kind=skill.kind, name=skill.name, description=skill.description, status=skill.status,
               available=skill.intervention.available, score=round(score, 6), trigger=round(trigger, 6),
               text=text, evidence=ev, matched=matched, skill=skill)


def _ranked(hits: list[Hit], k: int) -> list[Hit]:
    hits.sort(key=lambda h: (h.status == "deprecated", -h.score, h.slug))
    return hits[:k]


def retrieve(library: Library, findings: Sequence[Finding], domain: str | None = None, k: int = 5, *,
             store: Store | None = None, include_deprecated: bool = False) -> list[Hit]:
    """The ``k`` skills and mistake notes that best answer ``findings`` (best first).

    ``domain`` is a task domain (``domain_of(task)``); ``store`` routes text relevance through the state
    store's index (re-synced first). Entries with neither a trigger match nor any text relevance are left out.
    """
    usable = [f for f in findings if f.symptom != "diagnostic_error" and f.confidence > 0]
    if not usable or k < 1:
        return []
    texts = text_scores(library, query_of(usable), store=store)
    hits = []
    for skill in library.skills:
        if not skill.active and not include_deprecated:
            continue
        trigger, matched = trigger_score(skill, usable, domain)
        text = texts.get(skill.slug, 0.0)
        if trigger <= 0 and text <= 0:
            continue
        hits.append(_hit(skill, trigger, matched, text))
    return _ranked(hits, k)


def search(library: Library, query: str, k: int = 10, *, store: Store | None = None) -> list[Hit]:
    """Plain text search over every entry (deprecated ones included, ranked after active ones)."""
    texts = text_scores(library, query, store=store)
    hits = [_hit(s, 0.0, [], texts[s.slug]) for s in library.skills if s.slug in texts]
    for h in hits:
        h.score = h.text  # a search ranks by the words alone; the evidence part is shown, not added
    return _ranked(hits, k)
