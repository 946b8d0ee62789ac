"""Curation: the library changes only through validated delta operations, each one logged.

Why deltas (ACE's curator, not a rewrite): a model or a loop that rewrites a whole lesson file loses detail a
little at a time ("context collapse"); an op says exactly what changes — a new entry, one more backtest on
an entry, two near-duplicates merged, one entry deprecated — and is checked before it touches a file:

* ``add`` writes a new entry; a *skill* only with a backtest that promoted it, a *mistake* only with one that
  refuted or blocked it (Voyager: nothing is written before a critic confirmed it).
* ``update_evidence`` appends one backtest, bumps helpful / harmful / uses and the version.
* ``merge`` folds one entry into another (evidence lists concatenated, counters summed); the merged-away file
  is kept with ``status: deprecated`` and ``merged_into``.
* ``deprecate`` only when harmful evidence outweighs helpful, with the reason.

Nothing is deleted. Every applied op appends one JSON line to ``<library>/CURATION.jsonl`` (when, who — e.g.
``campaign:ID`` or ``user`` —, which files, which op, why). Ops on one library are serialised by an
exclusive lock on that log, so two campaigns sharing a library do not lose each other's updates.

:func:`record_outcome` is what a campaign's distill step calls after each decided backtest; it turns the
decision into the ops above (see its docstring for the clustering of mistakes).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import IO, Annotated, Any, Literal, get_args

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from evotrainer.config.harness import knob_docs
from evotrainer.core.errors import EvoError, format_validation_error
from evotrainer.core.symptoms import SYMPTOMS, check_symptom
from evotrainer.library.changes import direction, intervention_direction, knob_slug, resolve_value
from evotrainer.library.format import (
    SKILL_FILE,
    Counters,
    Evidence,
    EvidenceOutcome,
    Intervention,
    Skill,
    Slug,
    Trigger,
    harness_knobs,
)
from evotrainer.library.lint import check_file
from evotrainer.library.loader import CURATION_LOG, Library, relative, resolve_library, write_skill
from evotrainer.library.retrieve import domain_of, evidence_score

TEMPLATES = Path(__file__).resolve().parent / "templates"


class CurationError(EvoError):
    """An operation the library refuses (no confirming evidence, an unknown or existing slug, …); nothing changed."""


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actor: str = Field(..., min_length=1, max_length=200, description="Who applies it: 'campaign:<id>', 'user', …")
    why: str = Field(..., min_length=1, max_length=2000, description="Why, in one line (recorded in the log).")


class AddOp(_Op):
    """Write a new entry. A skill needs a promoting backtest in its evidence; a mistake a refuting or blocked one."""

    op: Literal["add"] = "add"
    skill: Skill

    @model_validator(mode="after")
    def _confirmed(self) -> AddOp:
        outcomes = {e.outcome for e in self.skill.evidence}
        if self.skill.kind == "skill" and "promote" not in outcomes:
            raise ValueError("a new skill needs at least one evidence entry with outcome promote (a backtest that "
                             "confirmed it); write literature skills by hand with their sources instead")
        if self.skill.kind == "mistake" and not outcomes & {"reject", "blocked"}:
            raise ValueError("a new mistake note needs at least one evidence entry with outcome reject or blocked")
        if self.skill.status != "active" or self.skill.version != 1:
            raise ValueError("a new entry starts active at version 1")
        return self


class UpdateEvidenceOp(_Op):
    """Append one backtest to an entry; ``uses`` always grows by one, at most one of helpful / harmful does."""

    op: Literal["update_evidence"] = "update_evidence"
    slug: Slug
    evidence: Evidence
    helpful: int = Field(0, ge=0, le=1, description="1 when the backtest bore the entry out.")
    harmful: int = Field(0, ge=0, le=1, description="1 when it contradicted the entry.")

    @model_validator(mode="after")
    def _one_side(self) -> UpdateEvidenceOp:
        if self.helpful and self.harmful:
            raise ValueError("one backtest is helpful or harmful, not both")
        return self


class MergeOp(_Op):
    """Fold ``source`` into ``into`` (same kind, same knob); ``source`` stays on disk, deprecated."""

    op: Literal["merge"] = "merge"
    into: Slug
    source: Slug

    @model_validator(mode="after")
    def _two(self) -> MergeOp:
        if self.into == self.source:
            raise ValueError("merge needs two different entries")
        return self


class DeprecateOp(_Op):
    """Mark an entry deprecated (kept on disk) — only when its harmful counter exceeds its helpful one."""

    op: Literal["deprecate"] = "deprecate"
    slug: Slug


CurationOp = Annotated[AddOp | UpdateEvidenceOp | MergeOp | DeprecateOp, Field(discriminator="op")]
_OP = TypeAdapter(CurationOp)


class LogEntry(BaseModel):
    """One line of ``CURATION.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    actor: str
    op: str
    slug: str
    files: list[str] = Field(..., description="Files written, relative to the library folder.")
    version: int = Field(..., description="Version of ``slug`` after the op.")
    why: str
    detail: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------ applying ops
@contextmanager
def _locked(root: Path) -> Iterator[IO[str]]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / CURATION_LOG, "a", encoding="utf-8") as log:
        try:
            import fcntl

            fcntl.flock(log.fileno(), fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
            pass
        yield log


def _read(root: Path, slug: str) -> Skill:
    file = root / slug / SKILL_FILE
    if not file.is_file():
        names = sorted(p.name for p in root.iterdir() if (p / SKILL_FILE).is_file())[:8] if root.is_dir() else []
        raise CurationError(f"no entry '{slug}' in {root}; entries include: {', '.join(names) or '(none)'}")
    skill, problems = check_file(file)
    if skill is None:
        raise CurationError(f"{file} is invalid, fix it first (evotrainer skills lint):\n"
                            + "\n".join(f"  - {p.field}: {p.message}" for p in problems))
    return skill


def _revise(skill: Skill, **changes: Any) -> Skill:
    """A validated copy of ``skill`` with ``changes`` (model_copy would skip validation)."""
    try:
        return Skill.model_validate({**skill.model_dump(), **changes})
    except ValidationError as err:
        raise CurationError(format_validation_error(err, skill.slug, Skill, "skill")) from None


def _apply(root: Path, op: Any) -> tuple[list[Skill], dict[str, Any]]:
    if isinstance(op, AddOp):
        if (root / op.skill.slug).exists():
            raise CurationError(f"'{op.skill.slug}' exists already in {root}; use update_evidence or merge")
        return [op.skill], {"kind": op.skill.kind}
    if isinstance(op, UpdateEvidenceOp):
        s = _read(root, op.slug)
        c = s.counters
        counters = Counters(helpful=c.helpful + op.helpful, harmful=c.harmful + op.harmful, uses=c.uses + 1)
        new = _revise(s, evidence=[*s.evidence, op.evidence], counters=counters, version=s.version + 1)
        return [new], {"evidence": op.evidence.model_dump(mode="json"), "helpful": op.helpful, "harmful": op.harmful}
    if isinstance(op, MergeOp):
        a, b = _read(root, op.into), _read(root, op.source)
        if a.kind != b.kind or a.intervention.knob != b.intervention.knob:
            raise CurationError(f"'{op.source}' ({b.kind}, {b.intervention.knob}) and '{op.into}' ({a.kind}, "
                                f"{a.intervention.knob}) are not near-duplicates: merge needs the same kind and knob")
        for s in (a, b):
            if not s.active:
                raise CurationError(f"'{s.slug}' is deprecated; merge only active entries")
        ca, cb = a.counters, b.counters
        merged = _revise(
            a, evidence=[*a.evidence, *b.evidence],
            counters=Counters(helpful=ca.helpful + cb.helpful, harmful=ca.harmful + cb.harmful, uses=ca.uses + cb.uses),
            triggers=[*a.triggers, *(t for t in b.triggers if t not in a.triggers)],
            sources=[*a.sources, *(x for x in b.sources if x not in a.sources)], version=a.version + 1)
        gone = _revise(b, status="deprecated", merged_into=a.slug, deprecated_reason=f"merged into {a.slug}: {op.why}",
                       version=b.version + 1)
        return [merged, gone], {"into": a.slug, "source": b.slug}
    if isinstance(op, DeprecateOp):
        s = _read(root, op.slug)
        if not s.active:
            raise CurationError(f"'{s.slug}' is already deprecated ({s.deprecated_reason})")
        if s.counters.harmful <= s.counters.helpful:
            raise CurationError(f"refusing to deprecate '{s.slug}': harmful {s.counters.harmful} does not outweigh "
                                f"helpful {s.counters.helpful}; deprecation needs more harmful than helpful backtests")
        return [_revise(s, status="deprecated", deprecated_reason=op.why, version=s.version + 1)], {}
    raise CurationError(f"unknown curation op {op!r}")  # pragma: no cover - the union is closed


def _commit(root: Path, op: Any, log: IO[str]) -> list[Skill]:
    """Apply a validated op under the lock: write its files, then its log line."""
    written, detail = _apply(root, op)
    files = [relative(root, write_skill(root, s)) for s in written]
    primary = written[0]  # for a merge: the entry merged into
    entry = LogEntry(at=datetime.now(timezone.utc), actor=op.actor, op=op.op, slug=primary.slug, files=files,
                     version=primary.version, why=op.why, detail=detail)
    log.write(entry.model_dump_json() + "\n")
    log.flush()
    os.fsync(log.fileno())
    return written


def apply(library: str | Path | Library, op: CurationOp | Mapping[str, Any]) -> list[Skill]:
    """Validate and apply one op, write its files, append its log line; returns the entries written.

    Raises ``CurationError`` (nothing written) when the op is malformed or the library refuses it.
    """
    root = library.path if isinstance(library, Library) else resolve_library(library)
    if not isinstance(op, BaseModel):
        try:
            op = _OP.validate_python(dict(op))
        except ValidationError as err:
            raise CurationError(format_validation_error(err, str(root), AddOp, "curation op")) from None
    with _locked(root) as log:
        return _commit(root, op, log)


def read_log(library: str | Path) -> list[LogEntry]:
    """Every op applied to the library, oldest first."""
    path = resolve_library(library) / CURATION_LOG
    if not path.is_file():
        return []
    return [LogEntry.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ from decisions
@cache
def _env() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True,
                       autoescape=False)


@cache
def _knob_doc() -> dict[str, str]:
    return {r["knob"]: r["description"] for r in knob_docs()}


def mistake_slug(knob: str, change: str, symptom: str) -> str:
    """The one note a (symptom, knob, direction) cluster of failures lives in."""
    return f"mistake-{knob_slug(knob)}-{change}-{symptom.replace('_', '-')}"[:100].rstrip("-")


def match_skill(library: Library, *, symptom: str, knob: str, old: Any, value: Any,
                cited: Sequence[str] = ()) -> Skill | None:
    """The active, available skill that moves ``knob`` the way ``old → value`` does, for ``symptom``.

    The skill must be triggered by the symptom or cited by the proposal: a backtest of "lower the learning
    rate" against a plateau says nothing about "lower the learning rate" against gradient spikes. Preference:
    one the proposal cited, then one whose resolved value is exactly ``value``, then the most backtested.
    """
    want = direction(old, value)
    found = [s for s in library.skills
             if s.kind == "skill" and s.active and s.intervention.available and s.intervention.knob == knob
             and (symptom in s.symptoms or s.slug in cited) and intervention_direction(s.intervention, old) == want]
    found.sort(key=lambda s: (s.slug not in cited, resolve_value(s.intervention, old) != value,
                              -s.counters.uses, s.slug))
    return found[0] if found else None


def known_mistake(library: Library, *, symptom: str, knob: str, old: Any, value: Any) -> Skill | None:
    """The active mistake note of the (symptom, knob, direction) cluster ``old → value`` falls in, if any."""
    note = library.find(mistake_slug(knob, direction(old, value), symptom))
    return note if note is not None and note.kind == "mistake" and note.active else None


def _fmt_effect(ev: Evidence) -> tuple[str, str]:
    effect = "not measured" if ev.effect is None else f"{ev.effect:+.3f}"
    ci = "n/a" if ev.ci_low is None or ev.ci_high is None else f"[{ev.ci_low:+.3f}, {ev.ci_high:+.3f}]"
    return effect, ci


def _context(ev: Evidence, *, symptom: str, knob: str, old: Any, value: Any, change: str) -> dict[str, Any]:
    effect, ci = _fmt_effect(ev)
    return {"ev": ev, "symptom": symptom, "symptom_text": SYMPTOMS[symptom].description.rstrip("."), "knob": knob, "old": old,
            "value": value, "direction": change, "effect": effect, "ci": ci,
            "seeds": ", ".join(str(x) for x in ev.seeds) or "n/a", "knob_doc": _knob_doc().get(knob, "")}


_VERBS = {"up": "Raising", "down": "Lowering", "on": "Turning on", "off": "Turning off", "same": "Re-setting"}


def new_mistake(library: Library, ev: Evidence, *, symptom: str, knob: str, old: Any, value: Any) -> Skill:
    """A mistake note for a refuted or gate-blocked change, its body rendered from the evidence."""
    change = direction(old, value)
    verb = _VERBS.get(change, "Setting")
    what = "blocked by a gate" if ev.outcome == "blocked" else "refuted"
    name = f"Mistake: {verb.lower()} {knob} against {symptom}"
    alternatives = sorted(
        (s for s in library.skills
         if s.kind == "skill" and s.active and s.intervention.available and symptom in s.symptoms
         and not (s.intervention.knob == knob and intervention_direction(s.intervention, old) == change)),
        key=lambda s: (-evidence_score(s), -max(t.weight for t in s.triggers if t.symptom == symptom), s.slug))[:3]
    body = _env().get_template("mistake.md.j2").render(
        name=name, verb=verb, **_context(ev, symptom=symptom, knob=knob, old=old, value=value, change=change),
        alternatives=[{"slug": s.slug, "change": s.intervention.describe(), "description": s.description}
                      for s in alternatives])
    return Skill(
        name=name[:120], kind="mistake",
        description=(f"{verb} {knob} ({old!r} → {value!r}) against {symptom} was {what} in campaign {ev.campaign}; "
                     "do not repeat it without new evidence.")[:600],
        triggers=[Trigger(symptom=symptom, domains=[domain_of(ev.task)])],
        intervention=Intervention(knob=knob, op="set", arg=value, available=knob in harness_knobs(),
                                  unavailable_reason=None if knob in harness_knobs() else "not a harness knob"),
        evidence=[ev], counters=Counters(helpful=1, uses=1), slug=mistake_slug(knob, change, symptom), body=body)


def new_skill(library: Library, ev: Evidence, *, symptom: str, knob: str, old: Any, value: Any) -> Skill:
    """A skill for a promoted change no skill described yet; relative (scale) when both values are numbers."""
    change = direction(old, value)
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (old, value))
    if numbers and old and value and (old > 0) == (value > 0) and value != old:
        iv = Intervention(knob=knob, op="scale", arg=float(f"{value / old:.6g}"))
    else:
        iv = Intervention(knob=knob, op="set", arg=value)
    base = f"{knob_slug(knob)}-{change}"[:90].rstrip("-")
    slug, n = base, 2
    while (library.path / slug).exists():
        slug, n = f"{base}-v{n}", n + 1
    verb = _VERBS.get(change, "Setting")
    name = f"{verb} {knob} against {symptom}"
    body = _env().get_template("skill.md.j2").render(
        name=name, change=iv.describe().removeprefix(f"{knob} "),
        **_context(ev, symptom=symptom, knob=knob, old=old, value=value, change=change))
    effect, ci = _fmt_effect(ev)
    return Skill(
        name=name[:120], kind="skill",
        description=(f"Backtest-confirmed: {knob} {old!r} → {value!r} against {symptom} changed held-out accuracy "
                     f"by {effect} {ci} in campaign {ev.campaign}.")[:600],
        triggers=[Trigger(symptom=symptom, domains=[domain_of(ev.task)])], intervention=iv, evidence=[ev],
        counters=Counters(helpful=1, uses=1), slug=slug, body=body)


def record_outcome(library_dir: str | Path | Library, *, symptom: str, knob: str, value: Any, outcome: str,
                   evidence: Evidence | Mapping[str, Any], actor: str, old: Any = None, cited: Sequence[str] = (),
                   deprecate_after: int = 2) -> list[CurationOp]:
    """Turn one decided backtest into curation ops, apply them, and return them in the order applied.

    ``outcome`` is the decision (promote, reject, inconclusive, blocked; failed branches say nothing about the
    change and record nothing). ``evidence`` is an ``Evidence`` or a mapping of its fields (``outcome`` and a
    missing ``value`` are filled in from the arguments). ``old`` is the knob's value before the change: it gives the direction.

    * reject / blocked: the mistake note of the cluster (symptom, knob, direction) — slug
      ``mistake-<knob>-<direction>-<symptom>`` — gets the evidence (helpful +1), or is created with it; the
      skill for that symptom (or cited) that moves the knob that way (:func:`match_skill`) gets it as harmful.
    * promote: the matching skill gets it as helpful, or a new skill is written from it; an existing mistake
      note of the cluster gets it as harmful (the "mistake" worked this time).
    * inconclusive: the matching skill and note get the evidence with ``uses`` +1 only.

    An entry whose harmful count then exceeds its helpful one, with at least ``deprecate_after`` harmful
    backtests, is deprecated. Recording the same proposal of the same campaign again applies nothing.
    """
    check_symptom(symptom)
    if outcome == "failed":
        return []
    if outcome not in get_args(EvidenceOutcome):
        raise CurationError(f"unknown outcome '{outcome}'; allowed: {', '.join(get_args(EvidenceOutcome))}, failed")
    if isinstance(evidence, Evidence):
        ev = evidence if evidence.value is not None else evidence.model_copy(update={"value": value})
    else:
        try:
            ev = Evidence.model_validate({"value": value, **dict(evidence), "outcome": outcome})
        except ValidationError as err:
            raise CurationError(format_validation_error(err, "record_outcome", Evidence, "evidence")) from None
    if ev.outcome != outcome:
        raise CurationError(f"evidence outcome '{ev.outcome}' differs from the decision '{outcome}'")
    root = library_dir.path if isinstance(library_dir, Library) else resolve_library(library_dir)
    # Plan and apply under one lock: a campaign deciding at the same moment sees this one's note, not a race.
    with _locked(root) as log:
        lib = Library.load(root, strict=False)
        ops = _plan(lib, ev, symptom=symptom, knob=knob, old=old, value=value, outcome=outcome, actor=actor,
                    cited=cited)
        applied: list[Any] = []
        for op in ops:
            s = _commit(root, op, log)[0]
            applied.append(op)
            c = s.counters
            if s.active and c.harmful > c.helpful and c.harmful >= deprecate_after:
                dep = DeprecateOp(slug=s.slug, actor=actor, why=f"harmful {c.harmful} > helpful {c.helpful} after "
                                                                f"proposal {ev.proposal} ({ev.campaign})")
                _commit(root, dep, log)
                applied.append(dep)
    return applied


def _plan(lib: Library, ev: Evidence, *, symptom: str, knob: str, old: Any, value: Any, outcome: str, actor: str,
          cited: Sequence[str]) -> list[Any]:
    skill = match_skill(lib, symptom=symptom, knob=knob, old=old, value=value, cited=cited)
    note = lib.find(mistake_slug(knob, direction(old, value), symptom))
    # idempotent per proposal: a re-run (after kill -9 mid-distill) finds its evidence already recorded
    if any(e.proposal == ev.proposal and e.campaign == ev.campaign for s in (skill, note) if s is not None
           for e in s.evidence):
        return []
    effect, ci = _fmt_effect(ev)
    why = f"{outcome} of proposal {ev.proposal} ({ev.campaign}): {knob} {old!r} → {value!r} for {symptom}, effect {effect} {ci}"
    ops: list[Any] = []
    if outcome in ("reject", "blocked"):
        if skill is not None:
            ops.append(UpdateEvidenceOp(slug=skill.slug, evidence=ev, harmful=1, actor=actor, why=why))
        if note is not None:
            ops.append(UpdateEvidenceOp(slug=note.slug, evidence=ev, helpful=1, actor=actor, why=why))
        else:
            ops.append(AddOp(skill=new_mistake(lib, ev, symptom=symptom, knob=knob, old=old, value=value),
                             actor=actor, why=why))
    elif outcome == "promote":
        if skill is not None:
            ops.append(UpdateEvidenceOp(slug=skill.slug, evidence=ev, helpful=1, actor=actor, why=why))
        else:
            ops.append(AddOp(skill=new_skill(lib, ev, symptom=symptom, knob=knob, old=old, value=value),
                             actor=actor, why=why))
        if note is not None:
            ops.append(UpdateEvidenceOp(slug=note.slug, evidence=ev, harmful=1, actor=actor, why=why))
    else:
        for entry in (skill, note):
            if entry is not None:
                ops.append(UpdateEvidenceOp(slug=entry.slug, evidence=ev, actor=actor, why=why))
    return ops


__all__ = ["AddOp", "UpdateEvidenceOp", "MergeOp", "DeprecateOp", "CurationOp", "CurationError", "LogEntry", "apply",
           "read_log", "record_outcome", "match_skill", "known_mistake", "mistake_slug", "new_mistake", "new_skill"]
