"""Promotion gates: diagnostics a branch must pass, whatever its score.

A branch that scores higher by an exploit (spraying answers at a lenient checker, collapsing to empty
answers under an efficiency reward, echoing the prompt) usually shows the exploit in its rollouts. The
gate, declared in the harness (``diagnostics.gate``), runs those diagnostics on the branch's evidence and
fails it when one reports a finding at or above its ``fail_at`` severity. A diagnostic that could not run
(crash, timeout, missing evidence for a gate rule) fails the gate unless ``gate_on_error: pass``.
"""

from __future__ import annotations

from pydantic import BaseModel

from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.registry import Registry
from evotrainer.evidence.model import Evidence


class GateResult(BaseModel):
    passed: bool
    reasons: list[str]
    findings: list[Finding]
    undecided: list[str] = []  # interim checks only: rules with too little evidence yet (they decide later)


def check_gate(ev: Evidence, registry: Registry, final: bool = True) -> GateResult:
    """Run the harness's gate on one branch's evidence.

    ``final=False`` is a backtest's interim look: a rule whose diagnostic has too little evidence *yet* (a few
    steps into a branch) is listed as undecided instead of failing the gate; the caller must not promote on
    an undecided gate, and the last look decides it as usual.
    """
    knobs = registry.harness.diagnostics
    reasons: list[str] = []
    undecided: list[str] = []
    findings: list[Finding] = []
    for rule in knobs.gate:
        results = registry.get(rule.diagnostic).run(ev)
        findings.extend(results)
        for f in results:
            if not final and f.symptom != "diagnostic_error" and Diagnostic.insufficient(f):
                undecided.append(f"{rule.diagnostic}: {f.explanation}")
            elif f.symptom == "diagnostic_error" or Diagnostic.insufficient(f):
                if knobs.gate_on_error == "fail":
                    reasons.append(f"{rule.diagnostic} could not decide ({f.explanation}); gate_on_error=fail")
            elif SEVERITY_RANK[f.severity] >= SEVERITY_RANK[rule.fail_at]:
                where = f" at steps {f.steps[0]}-{f.steps[1]}" if f.steps else ""
                reasons.append(f"{rule.diagnostic}: {f.severity} {f.symptom}{where}: {f.explanation}")
    return GateResult(passed=not reasons, reasons=reasons, findings=findings, undecided=undecided)
