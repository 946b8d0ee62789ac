"""The campaign's use of the skill library: which library it curates, what brains get from it, what it learns.

- **Which library.** A campaign starts from ``library:`` in its spec (else ``$EVOTRAINER_LIBRARY``, else the
  seed library ``skills/`` next to the package) and curates its own copy under ``HOME/campaigns/ID/library``
  — so a demo never dirties the repository, and a later campaign can start from what an earlier one learned
  (``library: runs/campaigns/ID/library``). ``library_in_place: true`` curates the folder itself instead.
- **What brains get.** Every active, available skill resolved against the current harness, as a candidate
  whose prior is the held-out effects in its evidence, ordered by retrieval (trigger match, text, evidence);
  inert knobs (``HarnessSpec.inert_knobs``) are dropped. Known mistakes become refuted changes — with the
  campaign's own refutations, they are not proposed again without new evidence — and the LLM brain sees the
  retrieved mistake notes; the propose node refuses any draft (an LLM's too) that repeats a known mistake for
  its own symptom. A mistake is repeated only when the change goes at least as far as a value that failed
  (raising a learning rate to 9e-5 is not the mistake of raising it to 9e-4).
- **What it learns.** After every decided backtest, distill calls :func:`record_outcome` for each decision:
  a refuted or blocked change updates its clustered mistake note, a promoted one the evidence of its skill.
  A re-run after ``kill -9`` adds nothing twice (evidence is keyed by proposal id).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from evotrainer.agent.brains.base import KnownMistake, RefutedChange
from evotrainer.config.harness import HarnessSpec
from evotrainer.config.policy import budget_overflow
from evotrainer.core.domain import Candidate, Finding
from evotrainer.library.candidates import to_candidates
from evotrainer.library.changes import direction
from evotrainer.library.curation import known_mistake, record_outcome
from evotrainer.library.loader import LIBRARY_ENV, Library
from evotrainer.library.retrieve import domain_of, retrieve

SEED_LIBRARY = Path(__file__).resolve().parents[2] / "skills"


def source_library(spec: Any) -> Path:
    """The folder a campaign starts from: its spec's ``library``, else ``$EVOTRAINER_LIBRARY``, else the seeds."""
    import os


    if spec.library:
        return spec.relative(spec.library).resolve()
    env = os.environ.get(LIBRARY_ENV)
    return Path(env).expanduser().resolve() if env else SEED_LIBRARY


def campaign_library(home: Path, campaign_id: str, spec: Any) -> Path:
    """The library this campaign reads and curates (copied once from the source, atomically)."""
    src = source_library(spec)
    if spec.library_in_place:
        return src
    dst = home / "campaigns" / campaign_id / "library"
    if not dst.exists():
        tmp = dst.with_name("library.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if src.is_dir():
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("*.lock", "*.tmp"))
        else:
            tmp.mkdir(parents=True)
        tmp.replace(dst)
    return dst


def _number(x: Any) -> float | None:
    """``x`` as a number on its knob's axis: itself, or a [lo, hi] range's midpoint (levels); None otherwise."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(_number(v) is not None for v in x):
        return (x[0] + x[1]) / 2
    return None


def repeats_mistake(note: Any, direction: str, value: Any) -> bool:
    """Does proposing ``value`` repeat what the note recorded as failing? (see the module docstring) A range is
    placed by its midpoint: levels [3, 3] refuted does not refute the nearer [4, 4] from [5, 5]."""
    nums = [n for e in note.evidence if e.outcome in ("reject", "blocked") if (n := _number(e.value)) is not None]
    here = _number(value)
    if here is not None and nums and direction in ("up", "down"):
        return here >= min(nums) if direction == "up" else here <= max(nums)
    return True  # on/off/to-<name>: the same move


def overflows_context(knob: str, value: Any, context: int | None) -> str | None:
    """Why ``knob=value`` cannot run on a policy with ``context`` positions, or None when it can."""

    if knob == "grpo.max_completion_length" and isinstance(value, int):
        return budget_overflow(value, context)
    return None


def brain_inputs(library_dir: Path, harness: HarnessSpec, findings: list[Finding], task: str, k: int = 8,
                 store: Any = None, context: int | None = None, task_inert: dict[str, str] | None = None) -> tuple[list[Candidate], list[KnownMistake], list[RefutedChange]]:
    """Candidates (retrieval order), retrieved mistake notes, and known mistakes as refuted changes.

    ``context`` is the policy's context length: a completion budget that would fill it (a relative skill
    doubles 192 to 384 for a 256-position model) is no candidate, since the job would refuse it.
    """

    lib = Library.load(library_dir, strict=False)
    domain = domain_of(task)
    hits = retrieve(lib, findings, domain=domain, k=max(k, len(lib.skills)), store=store)
    ranked = [h.skill for h in hits] + [s for s in lib.skills if s.slug not in {h.slug for h in hits}]
    # a skill whose every trigger names other domains does not apply here (a code-only reward knob means
    # nothing on arith); retrieval merely ranks a partial mismatch lower
    ranked = [s for s in ranked if not s.triggers or any(not t.domains or domain in t.domains for t in s.triggers)]
    inert = {**harness.inert_knobs(), **(task_inert or {})}
    candidates = [c for c in to_candidates(ranked, harness, findings) if c.knob not in inert
                  and overflows_context(c.knob, c.value, context) is None]
    refuted: list[RefutedChange] = []
    for c in candidates:
        for symptom in c.symptoms:
            note = _mistake(lib, harness, c.knob, c.value, symptom)
            if note is not None:
                refuted.append(RefutedChange(knob=c.knob, value=c.value, outcome=f"known mistake {note.slug}",
                                             symptoms=list(note.symptoms)))
                break
    mistakes = []
    for h in hits[:k]:
        s = h.skill
        if s.kind != "mistake" or not s.active:
            continue
        ev = next((e for e in s.evidence if e.value is not None), None)
        way = s.slug.removeprefix("mistake-")
        mistakes.append(KnownMistake(slug=s.slug, knob=s.intervention.knob, symptoms=list(s.symptoms),
                                     direction=f"to {ev.value!r}" if ev else way, failures=s.counters.helpful,
                                     successes=s.counters.harmful, description=s.description))
    return candidates, mistakes, refuted


def _mistake(lib: Any, harness: HarnessSpec, knob: str, value: Any, symptom: str) -> Any:
    """The active mistake note of the (symptom, knob, direction) cluster that ``value`` repeats, if any."""

    old = harness.knobs().get(knob)
    note = known_mistake(lib, symptom=symptom, knob=knob, old=old, value=value)
    return note if note is not None and repeats_mistake(note, direction(old, value), value) else None


def repeated_mistake(library_dir: Path | None, harness: HarnessSpec, knob: str, value: Any, symptom: str) -> str | None:
    """Slug of the known mistake a draft repeats for its own symptom (the propose node's last check), else None."""

    if library_dir is None:
        return None
    note = _mistake(Library.load(library_dir, strict=False), harness, knob, value, symptom)
    return note.slug if note is not None else None


def curate_round(ctx: Any, rnd: int, refuted_blocks: set[str] = frozenset()) -> list[dict[str, Any]]:
    """Record every decision of round ``rnd`` in the library (backtested and screened); the ops applied, for the
    event log.

    A block in ``refuted_blocks`` (its held-out gain confirmed: the gate misfired) is recorded as inconclusive,
    not as a mistake: the change did not fail, the judge did. A screened change (predicted to leave the training
    signal as it is) is recorded as ``screened`` evidence, with no effect.
    """

    proposals = ctx.store.list_proposals(ctx.campaign_id, round=rnd)
    decided = ctx.store.get_decisions([p.id for p in proposals])
    seeds = {pid: bt.seeds for bt in ctx.store.list_backtests(ctx.campaign_id) if bt.round == rnd
             for pid in bt.proposal_ids}
    applied: list[dict[str, Any]] = []
    for p in proposals:
        d = decided.get(p.id)
        if d is None or d.outcome == "failed":
            continue
        pid = p.id
        st = d.stats
        ev = {"campaign": ctx.campaign_id, "task": ctx.spec.task, "proposal": p.id, "seeds": seeds.get(pid, []),
              "effect": None if st is None else st.effect, "ci_low": None if st is None else st.ci_low,
              "ci_high": None if st is None else st.ci_high, "date": d.at.date(),
              "note": "; ".join(d.gate_reasons or d.reasons)[:2000]}
        outcome = "inconclusive" if d.outcome == "blocked" and pid in refuted_blocks else d.outcome
        if outcome != d.outcome:
            ev["note"] = ("block refuted by the held-out interval (gate misfire); " + ev["note"])[:2000]
        ops = record_outcome(ctx.library, symptom=p.hypothesis.symptom, knob=p.knob, old=p.old, value=p.new,
                             outcome=outcome, evidence=ev, actor=f"campaign:{ctx.campaign_id}", cited=p.cited_skills)
        applied += [{"proposal": pid, "op": op.op, "slug": getattr(op, "slug", None) or op.skill.slug} for op in ops]
    return applied
