"""What a diagnostic is: a named, versioned analyzer with documented parameters that returns findings.

Why a class with ``Params`` (pydantic) and declared evidence: parameters are what revisions change, so they
must be validated and documented like harness knobs; the declared evidence (``needs``: what it cannot decide
without, each a set of alternatives; ``reads``: what else it uses when present; ``requires_*`` for the simple
case) lets the framework say "not enough evidence" (an info finding naming what would supply it) instead of
crashing when a reader could not provide a column, e.g. a verl dump without per-rollout correctness. The same
declarations are the evidence contract (:mod:`evotrainer.diagnostics.contract`, ``evotrainer evidence
contract``), so the published contract cannot drift from what the diagnostics read (a test projects evidence
onto the declared fields and requires the same findings). ``run`` is the only entry point callers use; it
never raises for a diagnostic's own bug either — that becomes a ``diagnostic_error`` finding.
"""

from __future__ import annotations

import fnmatch
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from evotrainer.core.domain import (  # re-exported: what a user diagnostic returns
    SEVERITY_RANK,
    Example,
    Finding,
    Severity,
)
from evotrainer.evidence.model import Evidence


@dataclass(frozen=True)
class Need:
    """Evidence a diagnostic cannot decide without: one of ``options``, each a list of slots that must all be
    present, each slot a list of alternative fields (``'metric:NAME'`` — fnmatch patterns allowed —,
    ``'rollout:COLUMN'`` or ``'meta:KEY'``, a field of the run's own record). Built with :func:`need` from strings such as ``"rollout:reward + rollout:group_id|prompt_id"``.

    ``what`` names it in words ("strict correctness"); ``supply`` says how a user provides it when it is missing.
    """

    what: str
    options: tuple[tuple[tuple[str, ...], ...], ...]
    supply: str = ""

    def fields(self) -> list[str]:
        return list(dict.fromkeys(f for opt in self.options for slot in opt for f in slot))

    def met(self, ev: Evidence) -> bool:
        return any(all(any(field_present(ev, f) for f in slot) for slot in opt) for opt in self.options)

    def describe(self) -> str:
        """'metric 'reward' or rollout column 'reward'' (slots joined by 'with')."""
        def slot(s: tuple[str, ...], alone: bool) -> str:
            words = " or ".join(_field_words(f) for f in s)
            return words if alone or len(s) == 1 else f"({words})"
        return " or ".join(" with ".join(slot(s, len(opt) == 1) for s in opt) for opt in self.options)


def need(what: str, *options: str, supply: str = "") -> Need:
    """A :class:`Need` from option strings: slots joined by ``' + '``, alternatives in a slot by ``'|'`` sharing
    the first one's kind (``"rollout:reward + rollout:group_id|prompt_id"``)."""
    parsed = []
    for opt in options:
        slots = []
        for part in opt.split(" + "):
            kind, _, names = part.strip().partition(":")
            if kind not in ("metric", "rollout", "meta") or not names:
                raise ValueError(f"evidence field '{part}' must be 'metric:NAME', 'rollout:COLUMN' or 'meta:KEY'")
            slots.append(tuple(f"{kind}:{n}" for n in names.split("|")))
        parsed.append(tuple(slots))
    return Need(what, tuple(parsed), supply)


def _field_words(f: str) -> str:
    kind, _, name = f.partition(":")
    return {"metric": f"metric '{name}'", "meta": f"the run record's '{name}'"}.get(kind, f"rollout column '{name}'")


def field_present(ev: Evidence, field: str) -> bool:
    """Whether the evidence has data for ``'metric:NAME'`` (a pattern matches any metric), ``'rollout:COLUMN'`` or
    ``'meta:KEY'`` (a field of the run's own record, such as the recipe it trained under)."""
    kind, _, name = field.partition(":")
    if kind == "meta":
        return isinstance(ev.meta, dict) and ev.meta.get(name) not in (None, "", {}, [])
    frame = ev.metrics if kind == "metric" else ev.rollouts
    if "step" not in frame.columns or not len(frame):
        return False
    cols = [c for c in frame.columns if fnmatch.fnmatchcase(str(c), name)] if kind == "metric" and any(
        ch in name for ch in "*?[") else ([name] if name in frame.columns else [])
    if kind == "metric":  # a metric is data only where it is a finite number (all NaN or inf: nothing to read)
        return any(np.isfinite(pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype="float64")).any() for c in cols)
    return any(frame[c].notna().any() for c in cols)


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


def snippet(text: Any, limit: int = 160) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def examples_from(rows: pd.DataFrame, limit: int = 3) -> list[Example]:
    """Up to ``limit`` rollout examples from a rollout frame (whatever columns it has)."""
    out = []
    for i, (_, r) in enumerate(rows.head(limit).iterrows()):
        rid = f"{r.get('run_id', '')}:{r.get('step', '')}:{r.get('group_id', '')}:{r.name if r.name is not None else i}"
        out.append(
            Example(
                rollout_id=rid,
                step=int(r["step"]) if "step" in r and pd.notna(r["step"]) else None,
                prompt=snippet(r.get("prompt")),
                completion=snippet(r.get("completion")),
                reward=float(r["reward"]) if "reward" in r and pd.notna(r["reward"]) else None,
                correct=bool(r["correct"]) if "correct" in r and pd.notna(r["correct"]) else None,
            )
        )
    return out


class Diagnostic(ABC):
    """Subclass, set the class attributes, implement ``analyze``.

    What it reads is declared, and is its part of the evidence contract: ``needs`` (each a :class:`Need`: one
    of several alternatives must be there), ``requires_metrics`` / ``requires_rollouts`` (shorthand for a need
    with one alternative), and ``reads`` (fields it also uses when they are there; examples shown with a
    finding come from any column). When a need is not met ``run`` returns a single info finding — "not enough
    evidence: needs …" — naming what would supply it. A diagnostic whose needs depend on its parameters
    overrides :meth:`declared_needs`.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    symptom: ClassVar[str]
    signal: ClassVar[str]  # what it reads, in one sentence
    literature: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = NoParams
    requires_metrics: ClassVar[tuple[str, ...]] = ()
    requires_rollouts: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[Need, ...]] = ()
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: BaseModel | dict[str, Any] | None = None):
        if isinstance(params, self.Params):
            self.params = params
        else:
            self.params = self.Params.model_validate(params or {})

    # -------------------------------------------------------------------------------- helpers for subclasses
    def finding(self, severity: Severity, explanation: str, *, confidence: float = 0.8,
                steps: tuple[int, int] | None = None, metrics: dict[str, float] | None = None,
                examples: list[Example] | None = None, symptom: str | None = None) -> Finding:
        return Finding(
            symptom=symptom or self.symptom, diagnostic=self.name, version=self.version, severity=severity,
            confidence=round(float(confidence), 3), steps=steps,
            metrics={k: round(float(v), 6) for k, v in (metrics or {}).items()}, examples=examples or [],
            explanation=explanation,
        )

    @staticmethod
    def insufficient(f: Finding) -> bool:
        """True for the finding that says the evidence could not decide."""
        return f.severity == "info" and f.confidence == 0.0 and f.explanation.startswith("not enough evidence")

    def declared_needs(self) -> tuple[Need, ...]:
        """Every need: ``requires_metrics`` / ``requires_rollouts`` (one need each) and then ``needs``."""
        simple = tuple(need(f"metric '{c}'", f"metric:{c}") for c in self.requires_metrics)
        simple += tuple(need(f"rollout column '{c}'", f"rollout:{c}") for c in self.requires_rollouts)
        return simple + tuple(self.needs)

    def declared_reads(self) -> tuple[str, ...]:
        """Fields used when present beyond the needs (``reads``); overridden where parameters name them."""
        return tuple(self.reads)

    def missing(self, ev: Evidence) -> list[str]:
        """The declared needs this evidence does not meet, in words, each with how to supply it."""
        out = []
        for n in self.declared_needs():
            if not n.met(ev):
                words = n.describe()
                out.append((n.what if n.what == words else f"{n.what} ({words})")
                           + (f"; to supply it: {n.supply}" if n.supply else ""))
        return out

    # -------------------------------------------------------------------------------- entry point
    def run(self, ev: Evidence) -> list[Finding]:
        gaps = self.missing(ev)
        if gaps:
            return [self.finding("info", f"not enough evidence: needs {'; and '.join(gaps)}", confidence=0.0)]
        try:
            return self.analyze(ev)
        except Exception as err:  # noqa: BLE001 - a diagnostic's bug must not stop the caller
            frame = traceback.extract_tb(err.__traceback__)[-1]  # where, not the whole traceback: findings are output
            return [self.finding("warning", f"diagnostic crashed: {type(err).__name__}: {snippet(err, 300)} "
                                 f"(at {Path(frame.filename).name}:{frame.lineno} in {frame.name})", confidence=0.0,
                                 symptom="diagnostic_error", metrics={}, examples=[])]

    @abstractmethod
    def analyze(self, ev: Evidence) -> list[Finding]: ...

    @classmethod
    def describe(cls) -> dict[str, Any]:
        params = []
        for n, f in cls.Params.model_fields.items():
            bounds = {a: getattr(m, a) for m in f.metadata for a in ("ge", "gt", "le", "lt") if getattr(m, a, None) is not None}
            params.append({"name": n, "default": f.get_default(call_default_factory=True), "bounds": bounds,
                           "description": f.description or ""})
        return {"name": cls.name, "version": cls.version, "symptom": cls.symptom, "signal": cls.signal,
                "literature": cls.literature, "params": params}


__all__ = ["Diagnostic", "Example", "Finding", "NoParams", "Need", "SEVERITY_RANK", "Severity", "examples_from",
           "field_present", "need", "snippet"]
