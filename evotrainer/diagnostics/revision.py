"""Revising a diagnostic: replay it over a labelled archive and keep it only if it is better.

Diagnostics misfire: a gate lets an exploit through, or blocks a branch that was fine. A revision (new
parameters, or new code) is scored against an archive of past runs labelled by what was really wrong
with them (symptom tags, ``healthy``, and ``invalid`` for runs whose score came from an exploit), per
symptom with precision, recall and F1. A run may mark symptoms as ``unknown``; it is not scored for them. It is accepted only if it **loses no recall on runs labelled
invalid** (an exploit the old version caught must still be caught) **and improves F1**. Every attempt,
accepted or not, is appended to the diagnostic's version history (``HOME/diagnostics/history.jsonl``).

A run counts as flagged for a symptom when the diagnostic reports that symptom at severity ≥ warning.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evotrainer.config.harness import load_yaml_model
from evotrainer.core.domain import SEVERITY_RANK
from evotrainer.core.symptoms import check_symptom
from evotrainer.evidence.model import Evidence

ARCHIVE_MAX_BYTES = 16 * 1024 * 1024
"""An archive grows by a few hundred bytes per labelled branch (a campaign appends its rounds): 16 MiB is tens of
thousands of runs, where other YAML files stop at :data:`evotrainer.core.safe_yaml.MAX_BYTES`."""


class LabelledRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., description="Evidence: a job directory, a TRL output dir or a verl run dir.")
    labels: list[str] = Field(default_factory=list, description="Symptoms the run really has (empty = healthy).")
    invalid: bool = Field(False, description="Its score came from an exploit; gates must always catch it.")
    unknown: list[str] = Field(default_factory=list,
                               description="Symptoms whose truth is not known for this run; scoring skips the run for them.")
    note: str = ""

    @field_validator("labels", "unknown")
    @classmethod
    def _vocab(cls, v: list[str]) -> list[str]:
        return [check_symptom(s) for s in v]


class Archive(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs: list[LabelledRun] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Archive:

        arch = load_yaml_model(path, cls, "labelled archive", max_bytes=ARCHIVE_MAX_BYTES)
        for r in arch.runs:  # relative paths are relative to the archive file
            if not Path(r.path).is_absolute():
                r.path = str((Path(path).parent / r.path).resolve())
        return arch


class SymptomScore(BaseModel):
    symptom: str
    tp: int
    fp: int
    fn: int
    tn: int
    precision: float
    recall: float
    f1: float
    invalid_recall: float | None = Field(None, description="Recall over runs labelled invalid with this symptom.")
    flagged: list[str] = Field(default_factory=list)


class RevisionResult(BaseModel):
    diagnostic: str
    symptom: str
    candidate: dict[str, Any]
    accepted: bool
    reasons: list[str]
    before: SymptomScore
    after: SymptomScore
    date: str


def _flagged(findings, symptom: str) -> bool:
    return any(f.symptom == symptom and SEVERITY_RANK[f.severity] >= SEVERITY_RANK["warning"] for f in findings)


def score(diagnostic, symptom: str, archive: Archive, load: Callable[[str], Evidence]) -> SymptomScore:
    tp = fp = fn = tn = 0
    inv_total = inv_hit = 0
    flagged = []
    for run in archive.runs:
        if symptom in run.unknown:
            continue
        hit = _flagged(diagnostic.run(load(run.path)), symptom)
        truth = symptom in run.labels
        if hit:
            flagged.append(run.path)
        tp += hit and truth
        fp += hit and not truth
        fn += (not hit) and truth
        tn += (not hit) and not truth
        if run.invalid and truth:
            inv_total += 1
            inv_hit += hit
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return SymptomScore(symptom=symptom, tp=tp, fp=fp, fn=fn, tn=tn, precision=round(precision, 4),
                        recall=round(recall, 4), f1=round(f1, 4),
                        invalid_recall=round(inv_hit / inv_total, 4) if inv_total else None, flagged=flagged)


def evaluate_revision(current, candidate, symptom: str, archive: Archive, load: Callable[[str], Evidence],
                      description: dict[str, Any]) -> RevisionResult:
    """Score both versions on the archive and apply the acceptance rule."""
    cache: dict[str, Evidence] = {}

    def cached(p: str) -> Evidence:
        if p not in cache:
            cache[p] = load(p)
        return cache[p]

    before = score(current, symptom, archive, cached)
    after = score(candidate, symptom, archive, cached)
    problems = []
    if before.invalid_recall is not None and (after.invalid_recall or 0.0) < before.invalid_recall:
        problems.append(f"loses recall on invalid runs: {before.invalid_recall} → {after.invalid_recall}")
    if after.f1 <= before.f1:
        problems.append(f"F1 does not improve: {before.f1} → {after.f1}")
    summary = f"F1 {before.f1} → {after.f1}, invalid recall {before.invalid_recall} → {after.invalid_recall}"
    return RevisionResult(
        diagnostic=getattr(current, "name", "?"), symptom=symptom, candidate=description,
        accepted=not problems, reasons=problems or [summary], before=before, after=after, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def record(home: Path, result: RevisionResult) -> Path:
    path = home / "diagnostics" / "history.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(result.model_dump_json() + "\n")
    return path


def history(home: Path, name: str | None = None) -> list[RevisionResult]:
    path = home / "diagnostics" / "history.jsonl"
    if not path.is_file():
        return []
    out = []
    for ln in path.read_text().splitlines():
        try:
            r = RevisionResult.model_validate(json.loads(ln))
        except (json.JSONDecodeError, ValidationError):
            continue
        if name is None or r.diagnostic == name:
            out.append(r)
    return out
