"""The skill file: ``skills/<slug>/SKILL.md`` is YAML front matter (what a program reads) + a markdown body
(what a person reads).

Why files are the source of truth: a lesson must be reviewed, corrected and diffed in git like code, and a
library must travel from one campaign to the next as a folder. The state-store index (``index.py``) is
derived from the files and can be rebuilt at any time.

Why every rule lives in the pydantic model: a hand-written file, a file written by the curator and an op
built by the distill step are validated by the same code, so a skill that names an unknown symptom or a knob
the harness does not have is refused wherever it comes from; ``lint`` only turns those errors into lines.

Why a canonical writer: :func:`dump_skill` writes the front matter keys in model order with
``yaml.safe_dump(sort_keys=False)`` and the body verbatim, so parse → write is a fixed point (a second write
gives the same bytes) and a curated change shows in ``git diff`` as the lines it changed, nothing else.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evotrainer.config.harness import HarnessSpec, locked_knob
from evotrainer.core.domain import SkillKind, SkillStatus
from evotrainer.core.errors import ConfigError
from evotrainer.core.safe_yaml import parse_yaml
from evotrainer.core.symptoms import check_symptom

EvidenceOutcome = Literal["promote", "reject", "inconclusive", "blocked", "screened"]
InterventionOp = Literal["set", "scale", "step"]
ConditionOp = Literal["<", "<=", ">", ">=", "==", "!="]

SKILL_FILE = "SKILL.md"
SLUG_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
KNOB_PATTERN = r"^[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+$"
ARXIV_PATTERN = r"^\d{4}\.\d{4,5}(?:v\d+)?$"
DOMAIN_PATTERN = r"^[a-z][a-z0-9_-]*$"

# The level-2 headings a body must have, in the order a writer should use.
SECTIONS: dict[str, tuple[str, ...]] = {
    "skill": ("When to use", "Why it works", "How to apply", "When not to"),
    "mistake": ("What was tried", "What went wrong", "Correct approach", "Generalisable strategy", "Anti-patterns"),
}

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN, max_length=100)]
Domain = Annotated[str, StringConstraints(pattern=DOMAIN_PATTERN, max_length=40)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------ harness knobs
@functools.cache
def harness_knobs() -> dict[str, Any]:
    """Every knob path of the harness with its default value (the vocabulary of an intervention's knob)."""
    return HarnessSpec().knobs()


def _knob_field(path: str) -> Any:
    model: Any = HarnessSpec
    field = None
    for part in path.split("."):
        field = model.model_fields[part]
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return field


def _types(annotation: Any) -> set[Any]:
    """The concrete types a (possibly Optional / Union) annotation accepts, by origin (tuple for tuple[int, int])."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(_types(a) for a in args))
    return {typing.get_origin(annotation) or annotation}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_intervention(knob: str, op: str, arg: Any) -> None:
    """Raise ``ValueError`` unless ``op arg`` is a meaningful change of harness knob ``knob``.

    ``set``: ``arg`` must be a valid value of the knob (type, bounds, allowed names) — cross-knob rules such as
    "sync_ref_model needs beta > 0" depend on the harness it is applied to and are checked then, by
    ``HarnessSpec.with_knob``. ``scale``: a positive factor other than 1 on a numeric knob. ``step``: a non-zero
    integer shift of a ``[lo, hi]`` range knob (``data.difficulty``).
    """

    if locked_knob(knob):
        raise ValueError(f"knob '{knob}' is locked: diagnostics and gates judge interventions, no intervention may change them")
    knobs = harness_knobs()
    if knob not in knobs:
        raise ValueError(f"unknown knob '{knob}'; known knobs: {', '.join(sorted(knobs))} "
                         "(an intervention the harness cannot express yet is written with available: false)")
    field = _knob_field(knob)
    accepts = _types(field.annotation)
    if op == "scale":
        if not _is_number(arg) or arg <= 0 or arg == 1:
            raise ValueError(f"op scale multiplies the current value: arg must be a positive number other than 1, got {arg!r}")
        if not accepts & {int, float}:
            raise ValueError(f"knob '{knob}' is not numeric; scale needs a number knob (use op: set)")
    elif op == "step":
        if not isinstance(arg, int) or isinstance(arg, bool) or arg == 0:
            raise ValueError(f"op step shifts a [lo, hi] range: arg must be a non-zero integer, got {arg!r}")
        if tuple not in accepts and list not in accepts:
            raise ValueError(f"knob '{knob}' is not a [lo, hi] range; step only applies to range knobs such as data.difficulty")
    else:
        ann = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        try:
            TypeAdapter(ann).validate_python(arg)
        except ValidationError as err:
            raise ValueError(f"{arg!r} is not a valid value of {knob}: {err.errors()[0]['msg']} "
                             f"({field.description or 'see evotrainer harness knobs'})") from None


# ------------------------------------------------------------------------------------------ front matter
class Condition(_Model):
    """A test on one metric of the finding, e.g. ``{metric: ratio, op: '<', value: 0.3}``."""

    metric: str = Field(..., pattern=r"^[A-Za-z0-9_./-]+$", description="Key of the finding's `metrics` (e.g. ratio, truncated_share).")
    op: ConditionOp = Field(..., description="Comparison: <, <=, >, >=, ==, !=.")
    value: float = Field(..., description="Right-hand side of the comparison.")

    def holds(self, metrics: dict[str, float]) -> bool | None:
        """True / False, or None when the finding does not carry the metric (unknown)."""
        if self.metric not in metrics:
            return None
        x = metrics[self.metric]
        return {"<": x < self.value, "<=": x <= self.value, ">": x > self.value, ">=": x >= self.value,
                "==": x == self.value, "!=": x != self.value}[self.op]


class Trigger(_Model):
    """When the skill applies: a symptom, optionally only when metrics of its finding pass conditions, in domains."""

    symptom: str = Field(..., description="A symptom from the diagnostics vocabulary (evotrainer.core.symptoms).")
    conditions: list[Condition] = Field(default_factory=list, description="All must hold on the finding's metrics.")
    domains: list[Domain] = Field(default_factory=list, description="Task domains (math, code, agentic, …); empty = any.")
    weight: float = Field(1.0, gt=0.0, le=1.0,
                          description="How directly the intervention answers this symptom: 1 = the remedy its source "
                                      "proposes for it; lower = a generic or secondary remedy.")

    @field_validator("symptom")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_symptom(v)


class Intervention(_Model):
    """The one harness change a skill recommends (or a mistake note warns against)."""

    knob: str = Field(..., pattern=KNOB_PATTERN, description="Dotted harness knob path (evotrainer harness knobs).")
    op: InterventionOp = Field(..., description="set = use arg as the value; scale = multiply the current value by "
                                                 "arg; step = shift a [lo, hi] range by arg levels.")
    arg: Any = Field(..., description="The value (set), factor (scale) or number of levels (step).")
    available: bool = Field(True, description="False when the harness cannot express the change yet.")
    unavailable_reason: str | None = Field(None, description="Required when available is false: what the harness lacks.")

    @model_validator(mode="after")
    def _expressible(self) -> Intervention:
        if not self.available:
            if not (self.unavailable_reason or "").strip():
                raise ValueError("available: false needs unavailable_reason (what the harness lacks to express it)")
            return self
        if self.unavailable_reason:
            raise ValueError("unavailable_reason is only allowed with available: false")
        check_intervention(self.knob, self.op, self.arg)
        return self

    def describe(self) -> str:
        verb = {"set": "=", "scale": "×", "step": "step"}[self.op]
        return f"{self.knob} {verb} {self.arg!r}" + ("" if self.available else " (unavailable)")


class Evidence(_Model):
    """One decided backtest of this intervention: held-out effect (treatment − control) with its interval."""

    campaign: str = Field(..., min_length=1, description="Campaign id.")
    task: str = Field(..., min_length=1, description="Task name.")
    proposal: str = Field(..., min_length=1, description="Proposal id in the campaign store.")
    value: Any = Field(None, description="The knob value the backtest tried (absolute).")
    effect: float | None = Field(None, description="Held-out accuracy effect, points/100 (None when not measured).")
    ci_low: float | None = Field(None, description="Lower end of the effect's confidence interval.")
    ci_high: float | None = Field(None, description="Upper end of the effect's confidence interval.")
    seeds: list[int] = Field(default_factory=list, description="Seeds of the paired branches.")
    outcome: EvidenceOutcome = Field(..., description="The decision: promote, reject, inconclusive, blocked (by a gate) "
                                                      "or screened (predicted no effect on the training signal).")
    date: dt.date = Field(..., description="Day of the decision (YYYY-MM-DD).")
    note: str = Field("", max_length=2000, description="Decision or gate reasons, in one line.")

    @model_validator(mode="after")
    def _interval(self) -> Evidence:
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low={self.ci_low} is above ci_high={self.ci_high}")
        return self


class Counters(_Model):
    """ACE-style counters: backtests that supported the lesson, that contradicted it, and all decided ones."""

    helpful: int = Field(0, ge=0, description="Backtests that bore the lesson out (skill promoted / mistake failed again).")
    harmful: int = Field(0, ge=0, description="Backtests that contradicted it (skill refuted or blocked / mistake promoted).")
    uses: int = Field(0, ge=0, description="Decided backtests of it, inconclusive ones included.")

    @model_validator(mode="after")
    def _consistent(self) -> Counters:
        if self.uses < self.helpful + self.harmful:
            raise ValueError(f"uses={self.uses} is below helpful + harmful = {self.helpful + self.harmful}")
        return self


class Source(_Model):
    """Where the idea comes from: a paper (arXiv id) or a page (url); a title alone for common practice."""

    title: str = Field(..., min_length=1, max_length=300, description="Title of the paper or page.")
    arxiv: str | None = Field(None, pattern=ARXIV_PATTERN, description="arXiv id such as 2503.14476.")
    url: str | None = Field(None, pattern=r"^https?://\S+$", description="Link when there is no arXiv id.")

    def cite(self) -> str:
        return self.title + (f", arXiv {self.arxiv}" if self.arxiv else f", {self.url}" if self.url else "")


class Skill(_Model):
    """One library entry: the front matter fields in file order, then ``slug`` (the folder) and ``body``."""

    name: str = Field(..., min_length=1, max_length=120, description="Short human title.")
    description: str = Field(..., min_length=1, max_length=600, description="One or two sentences: symptom → change.")
    kind: SkillKind = Field(..., description="skill (a recommended change) or mistake (a change that failed).")
    triggers: list[Trigger] = Field(..., min_length=1, description="When it applies (at least one).")
    intervention: Intervention
    evidence: list[Evidence] = Field(default_factory=list, description="Our backtests of it (never literature claims).")
    counters: Counters = Field(default_factory=Counters)
    status: SkillStatus = Field("active", description="active, or deprecated (kept, never deleted).")
    version: int = Field(1, ge=1, description="Bumped by every curation operation.")
    sources: list[Source] = Field(default_factory=list, description="Papers or pages behind it.")
    merged_into: Slug | None = Field(None, description="Slug this entry was merged into (then status is deprecated).")
    deprecated_reason: str | None = Field(None, max_length=1000, validate_default=True,
                                          description="Why it was deprecated (required when status is deprecated).")
    slug: Slug = Field(..., description="The folder name: lowercase letters, digits and single hyphens.")
    body: str = Field(..., description="Markdown body with the sections its kind requires.")

    @field_validator("deprecated_reason")
    @classmethod
    def _why_deprecated(cls, v: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("status") == "deprecated" and not (v or "").strip():
            raise ValueError("status deprecated needs a deprecated_reason")
        if info.data.get("status") == "active" and info.data.get("merged_into") is not None:
            raise ValueError("an entry with merged_into must have status deprecated")
        return v

    @field_validator("body")
    @classmethod
    def _sections(cls, v: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        problems = section_problems(v, kind) if kind in SECTIONS else []
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _rules(self) -> Skill:
        if self.merged_into == self.slug:
            raise ValueError(f"merged_into names the entry itself ('{self.slug}')")
        if self.kind == "skill" and not self.sources and not self.evidence:
            raise ValueError("a skill needs at least one source or one evidence entry (where does it come from?)")
        return self

    @property
    def symptoms(self) -> list[str]:
        return list(dict.fromkeys(t.symptom for t in self.triggers))

    @property
    def active(self) -> bool:
        return self.status == "active"

    def front_matter(self) -> dict[str, Any]:
        """The front matter as JSON-compatible data in canonical order (what :func:`dump_skill` writes)."""
        data = self.model_dump(mode="json", exclude={"slug", "body"})
        for t in data["triggers"]:
            for key, default in (("conditions", []), ("domains", []), ("weight", 1.0)):
                if t[key] == default:
                    del t[key]
        iv = data["intervention"]
        if iv["unavailable_reason"] is None:
            del iv["unavailable_reason"]
        for s in data["sources"]:
            for key in ("arxiv", "url"):
                if s[key] is None:
                    del s[key]
        for e in data["evidence"]:
            if e["note"] == "":
                del e["note"]
        for key in ("merged_into", "deprecated_reason"):
            if data[key] is None:
                del data[key]
        return data

    def source_text(self) -> str:
        return "; ".join(s.cite() for s in self.sources) or "our backtests"


# ------------------------------------------------------------------------------------------ body sections
_HEADING = re.compile(r"^##\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def sections(body: str) -> dict[str, str]:
    """Level-2 sections of a markdown body, heading → text (fenced code blocks are not scanned for headings).

    A heading that appears twice is reported by :func:`section_problems`; here the later one wins.
    """
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if m and not line.startswith("###"):
            if current is not None:
                out[current] = "\n".join(lines).strip()
            current, lines = m.group(1), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines).strip()
    return out


def section_problems(body: str, kind: str) -> list[str]:
    """What is wrong with a body's sections for this kind: missing, unknown, duplicated or empty ones."""
    required = SECTIONS.get(kind, ())
    wanted = {s.casefold(): s for s in required}
    headings = [m.group(1) for line in _unfenced(body) if (m := _HEADING.match(line)) and not line.startswith("###")]
    found = sections(body)
    problems = []
    seen: set[str] = set()
    for h in headings:
        key = h.casefold()
        if key not in wanted:
            problems.append(f"unknown section '## {h}'; a {kind} body has exactly: {', '.join(required)}")
        elif key in seen:
            problems.append(f"section '## {h}' appears twice")
        seen.add(key)
    for key, name in wanted.items():
        if key not in seen:
            problems.append(f"missing section '## {name}'; a {kind} body needs: {', '.join(required)}")
    for h, text in found.items():
        if h.casefold() in wanted and not text:
            problems.append(f"section '## {h}' is empty")
    return problems


def _unfenced(body: str) -> list[str]:
    out, fenced = [], False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


# ------------------------------------------------------------------------------------------ parse / write
class FrontMatterError(ValueError):
    """The text has no front matter block, or it is not YAML, or not a mapping. ``field`` says which part."""

    def __init__(self, message: str, field: str = "front matter"):
        super().__init__(message)
        self.field = field


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """``(front matter mapping, body)``; the body is everything after the closing ``---`` line, verbatim."""
    if not text.startswith("---\n") and not text.startswith("---\r\n"):
        raise FrontMatterError("missing front matter: the file must start with a '---' line, then YAML, then '---'")
    rest = text.split("\n", 1)[1]
    m = re.search(r"^---[ \t]*\r?$\n?", rest, flags=re.MULTILINE)
    if m is None:
        raise FrontMatterError("front matter is not closed: add a '---' line after the YAML")
    raw, body = rest[: m.start()], rest[m.end():]
    try:  # the one safe loader: duplicate keys, alias bombs, deep nesting and python tags are refused with their line
        data = parse_yaml(raw, "front matter", line_offset=1) if raw.strip() else {}  # +1: the opening '---'
    except ConfigError as err:
        msg = str(err).removeprefix("front matter: ")
        raise FrontMatterError(("front matter is " if msg.startswith("not valid") else "front matter: ") + msg) from None
    if not isinstance(data, dict):
        raise FrontMatterError(f"front matter must be a YAML mapping of fields, got {type(data).__name__}")
    for reserved in ("slug", "body"):
        if reserved in data:
            raise FrontMatterError(f"'{reserved}' is not a front matter field: the slug is the folder name and the "
                                   "body is the markdown after the front matter", field=reserved)
    return data, body


def parse_skill(text: str, slug: str) -> Skill:
    """Parse a SKILL.md text; raises ``FrontMatterError`` or pydantic ``ValidationError`` (see ``lint``)."""
    data, body = split_front_matter(text)
    return Skill.model_validate({**data, "slug": slug, "body": body})


class _Dumper(yaml.SafeDumper):
    """Block style everywhere except lists of plain scalars, which stay on one line (``seeds: [0, 1, 2]``)."""


def _list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(isinstance(x, (str, int, float, bool, dt.date)) or x is None for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _list)


def dump_skill(skill: Skill) -> str:
    """The canonical file text: front matter in model order, then the body verbatim."""
    data = skill.front_matter()
    for e in data["evidence"]:
        e["date"] = dt.date.fromisoformat(e["date"])  # a YAML date (2026-01-02), not a quoted string
    fm = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                   width=100)
    return f"---\n{fm}---\n{skill.body}"


def relative(library: Path, file: Path) -> str:
    """A file's path relative to the library folder (as the curation log records it)."""
    try:
        return str(file.resolve().relative_to(library.resolve()))
    except ValueError:
        return str(file)
