"""What a diagnostic is: a named, versioned analyzer with documented parameters that returns findings.

Why a class with ``Params`` (pydantic) and ``requires``: parameters are what revisions change, so they
must be validated and documented like harness knobs; ``requires`` lets the framework say "not enough
evidence" (an info finding) instead of crashing when a reader could not provide a column, e.g. a verl
dump without per-rollout correctness. ``run`` is the only entry point callers use; it never raises for
a diagnostic's own bug either — that becomes a ``diagnostic_error`` finding.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evotrainer.diagnostics.symptoms import check_symptom
from evotrainer.evidence import Evidence

Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


class Example(BaseModel):
    """One rollout shown as evidence (text truncated; it is untrusted data)."""

    rollout_id: str
    step: int | None = None
    prompt: str = ""
    completion: str = ""
    reward: float | None = None
    correct: bool | None = None


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    symptom: str
    diagnostic: str
    version: str
    severity: Severity
    confidence: float = Field(ge=0.0, le=1.0)
    steps: tuple[int, int] | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)
    explanation: str

    @field_validator("symptom")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_symptom(v)


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

    ``requires_metrics`` / ``requires_rollouts`` list the columns without which the diagnostic cannot
    decide; when one is missing (or has no data) ``run`` returns a single info finding that says which.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    symptom: ClassVar[str]
    signal: ClassVar[str]  # what it reads, in one sentence
    literature: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = NoParams
    requires_metrics: ClassVar[tuple[str, ...]] = ()
    requires_rollouts: ClassVar[tuple[str, ...]] = ()

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

    def missing(self, ev: Evidence) -> list[str]:
        out = []
        for c in self.requires_metrics:
            if c not in ev.metrics.columns or ev.metrics[c].dropna().empty:
                out.append(f"metric '{c}'")
        for c in self.requires_rollouts:
            if c not in ev.rollouts.columns or ev.rollouts[c].dropna().empty:
                out.append(f"rollout column '{c}'")
        return out

    # -------------------------------------------------------------------------------- entry point
    def run(self, ev: Evidence) -> list[Finding]:
        gaps = self.missing(ev)
        if gaps:
            return [self.finding("info", f"not enough evidence: needs {', '.join(gaps)}", confidence=0.0)]
        try:
            return self.analyze(ev)
        except Exception as err:  # noqa: BLE001 - a diagnostic's bug must not stop the caller
            return [self.finding("warning", f"diagnostic crashed: {type(err).__name__}: {err}", confidence=0.0,
                                 symptom="diagnostic_error",
                                 metrics={}, examples=[Example(rollout_id="traceback",
                                                               completion=snippet(traceback.format_exc(), 600))])]

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
