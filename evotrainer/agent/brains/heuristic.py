"""The offline default brain: findings → candidate interventions, ranked by Thompson sampling.

Why Thompson sampling: which intervention helps a given run is uncertain, evidence arrives one backtest
at a time, and both exploiting what worked and trying what has not been tried matter. Each candidate's
held-out effect has a normal prior (mean 0, sd ``prior_sd``) updated by the effects recorded in earlier
backtests (known noise ``noise_sd``); one draw from each posterior, plus a bonus for how strongly the
current findings call for it (for each present symptom it answers: severity rank + confidence, times the skill's
trigger weight for that symptom; summed, times ``relevance_bonus``), ranks the candidates. A symptom that another one
the change answers can produce (the registry's ``explains``: every all-wrong group is a dead group) is that one's
consequence, not a second piece of evidence, and is not added again: otherwise a remedy for dead groups that also
names too-hard groups counted the same groups twice and outranked a remedy for the too-hard levels themselves.
A draft's hypothesis names the most relevant symptom training showed at warning or above (the registry's
``observed``), a reading of the recipe only when its change answers no such finding: the reading says where the
knob stands, the evidence why the run suffers, and the lesson a backtest leaves is filed under the symptom the
hypothesis names.
The bonus is as large as the prior's spread, so a critical finding's remedies outrank an info-level
plateau's, while draws still explore among them (0.01 let the demo campaign chase the plateau instead of
its critical truncation). A finding that says its evidence could not decide ("not enough evidence") makes no symptom
present: round 0's 20-step segment is too short for the plateau diagnostic, and counting that finding made every
plateau remedy an answer, so a draw two spreads high put one ahead of a critical truncation's remedies
(bench/log/19-flaw-suite.md, 2026-12-03). Draws are seeded by (campaign seed, round), so a
resumed campaign proposes the same thing again.

Never proposed: a change that does nothing, a change already refuted in this campaign, or a known
mistake — unless a symptom is present now that was not present when it failed ("new evidence").

When to stop exploring. A backtest costs (1 + k) × seeds × branch steps that the mainline does not
train, so a candidate that only answers the ever-present plateau is backtested only while its posterior
probability of beating ``min_effect`` is at least ``explore_threshold``. Untried candidates do not start at
a neutral prior: their prior mean is the library's average recorded effect (each effect clipped to
±2 prior sd, so one disastrous change does not dominate), shrunk towards 0 by ``prior_strength``
pseudo-observations — empirical Bayes over "what changes did on this record". A library in which most
changes were refuted thus makes the next campaign train its mainline instead of re-exploring, while a
remedy for a warning or critical finding is always tried (a present problem is evidence enough).
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist

from evotrainer.agent.brains.base import BrainContext, BrainResult
from evotrainer.core.domain import SEVERITY_RANK, Candidate, Hypothesis, ProposalDraft
from evotrainer.core.symptoms import SYMPTOMS
from evotrainer.diagnostics.base import Diagnostic

# A symptom that can produce others (the registry's ``explains``): while both are present, the remedies for the
# cause are as urgent as those for the symptoms it may explain.
EXPLAINS: dict[str, tuple[str, ...]] = {s.name: s.explains for s in SYMPTOMS.values() if s.explains}


class HeuristicBrain:
    name = "heuristic"

    def __init__(self, prior_sd: float = 0.05, noise_sd: float = 0.03, relevance_bonus: float = 0.05,
                 explore_threshold: float = 0.0, prior_strength: float = 4.0):
        self.prior_sd, self.noise_sd, self.relevance_bonus = prior_sd, noise_sd, relevance_bonus
        self.explore_threshold, self.prior_strength = explore_threshold, prior_strength

    def prior_mean(self, candidates: list[Candidate]) -> float:
        """Empirical-Bayes prior mean for a candidate: the record's clipped average effect, shrunk to 0."""
        cap = 2 * self.prior_sd
        effects = [max(-cap, min(cap, e)) for c in candidates for e in c.effects]
        return sum(effects) / (len(effects) + self.prior_strength) if effects else 0.0

    def posterior(self, effects: list[float], prior_mean: float = 0.0) -> tuple[float, float]:
        precision = 1 / self.prior_sd**2 + len(effects) / self.noise_sd**2
        mean = (prior_mean / self.prior_sd**2 + sum(effects) / self.noise_sd**2) / precision
        return mean, math.sqrt(1 / precision)

    def propose(self, ctx: BrainContext) -> BrainResult:
        rng = random.Random(f"{ctx.seed}:{ctx.round}")
        # How strongly the findings call for each symptom: severity rank + confidence of the strongest finding.
        pressure: dict[str, float] = {}
        for f in ctx.findings:
            if (f.symptom == "diagnostic_error" or (f.severity == "info" and f.symptom != "plateau")
                    or Diagnostic.insufficient(f)):  # "not enough evidence" says nothing of its symptom
                continue
            pressure[f.symptom] = max(pressure.get(f.symptom, 0.0), SEVERITY_RANK[f.severity] + f.confidence)
        for cause, effects in EXPLAINS.items():
            if cause in pressure:
                pressure[cause] = max([pressure[cause]] + [pressure[e] for e in effects if e in pressure])
        present = set(pressure)
        notes: list[str] = []
        scored: list[tuple[float, Candidate, str, float]] = []
        current = ctx.harness.knobs()
        mu0 = self.prior_mean(ctx.candidates)
        for c in ctx.candidates:
            if current.get(c.knob) == c.value:
                continue
            matched = [s for s in c.symptoms if s in present]
            # With no symptom at all, every candidate may be explored, ranked by its evidence alone.
            if present and not matched:
                continue
            blocked = [r for r in ctx.refuted if r.knob == c.knob and r.value == c.value]
            # new evidence = a warning/critical symptom that was not there when it failed (an info-level
            # plateau is always around and would reopen every refuted change)
            serious = {s for s, p in pressure.items() if p >= SEVERITY_RANK["warning"]}
            if blocked and not (serious - set().union(*[set(r.symptoms) for r in blocked])):
                notes.append(f"skip {c.id}: {c.knob}={c.value!r} was {blocked[0].outcome} and no new symptom since")
                continue
            if c.mistake and not blocked and not matched:
                continue
            mean, sd = self.posterior(c.effects, mu0)
            p_gain = 1 - NormalDist(mean, sd).cdf(ctx.min_effect)
            urgent = any(pressure[s] >= SEVERITY_RANK["warning"] for s in matched)
            if not urgent and p_gain < self.explore_threshold:
                notes.append(f"skip {c.id}: P(effect > {ctx.min_effect:+.3f}) = {p_gain:.2f} < "
                             f"{self.explore_threshold:.2f} "
                             f"(posterior mean {mean:+.3f} from {len(c.effects)} backtest(s), prior mean {mu0:+.3f})")
                continue
            draw = rng.gauss(mean, sd)
            # how strongly the findings call for it: each present symptom it answers, by the finding's pressure and
            # by how directly the skill answers that symptom (its trigger weight), summed, so that a change which
            # answers two findings at once (a group of 2 read from the recipe and seen as dead groups) outranks one
            # answering either alone, and a generic remedy a direct one less
            relevance = {s: pressure[s] * c.weights.get(s, 1.0) for s in matched}
            effects = {e for s in matched for e in EXPLAINS.get(s, ()) if e in matched}  # counted with their cause
            bonus = self.relevance_bonus * sum(v for s, v in relevance.items() if s not in effects)
            # the hypothesis names what training showed (at warning or above: an info-level plateau is always
            # around) before a reading of the recipe (core/symptoms.py, observed)
            symptom = max(matched, key=lambda s: (SYMPTOMS[s].observed and pressure[s] >= SEVERITY_RANK["warning"],
                                                  relevance[s])) if matched else "plateau"
            scored.append((draw + bonus, c, symptom, mean))
        scored.sort(key=lambda t: -t[0])
        drafts: list[ProposalDraft] = []
        used: set[str] = set()
        for score, c, symptom, mean in scored:
            if c.knob in used:
                continue
            used.add(c.knob)
            old = current.get(c.knob)
            drafts.append(ProposalDraft(
                knob=c.knob, value=c.value,
                hypothesis=Hypothesis(
                    symptom=symptom, cause=SYMPTOMS[symptom].cause,
                    change=_change(c.description, f" ({c.knob}: {old!r} → {c.value!r})"),
                    expected_effect=f"held-out accuracy up; posterior mean effect {mean:+.3f} from {len(c.effects)} "
                                    f"past backtest(s)"),
                rationale=f"{c.id} ({c.source}); Thompson score {score:+.4f}",
                cited_skills=[c.id], prior=round(mean, 4),
            ))
            if len(drafts) >= ctx.max_proposals:
                break
        if not drafts:
            notes.append("no candidate worth a backtest for the current findings: the round trains the mainline")
        return BrainResult(drafts=drafts, brain=self.name, notes=notes)


CHANGE_CHARS = next(m.max_length for m in Hypothesis.model_fields["change"].metadata if hasattr(m, "max_length"))


def _change(description: str, move: str) -> str:
    """A hypothesis's ``change``: the skill's description (clipped: a library's descriptions are free text of any
    length) followed by the move itself, within the field's limit."""
    room = CHANGE_CHARS - len(move)
    if room <= 1:
        return move.strip()[:CHANGE_CHARS]
    return (description if len(description) <= room else description[: room - 1].rstrip() + "…") + move

