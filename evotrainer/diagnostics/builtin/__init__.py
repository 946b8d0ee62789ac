"""The built-in diagnostics: one per symptom of ``symptoms.SYMPTOMS`` that rollout evidence can show.

Each reads a per-step series (a TRL metric, or the same quantity aggregated from the rollouts when the
metric is missing) or the rollout rows of the recent window, and applies a thresholded rule whose
defaults keep a healthy GRPO run quiet: accuracy climbing from ~40% to ~80%, entropy easing from ~0.5 to
~0.3 nats, stable lengths, a few all-correct / all-wrong groups, grad-norm fluctuating ×2-3 and reward
noise of ±0.05 per step produce no warning or critical finding.

Findings name the steps they cover (the recent window, or the range where the trigger was seen), carry the
numbers and thresholds that triggered them, and up to three rollout examples when rollouts exist.

The modules group them by the evidence they read:

- ``groups``: GRPO groups without learning signal (``dead_groups``, ``too_hard``, ``too_easy``).
- ``dynamics``: per-step training metrics (``entropy_collapse``, ``entropy_blowup``, ``kl_blowup``,
  ``grad_spike``, ``nan``, ``plateau``, ``learns_nothing``).
- ``text``: completion lengths and text (``truncation``, ``length_collapse``, ``repetition``, ``echo``,
  ``answer_spraying``); the only ones that read text, on a bounded sample of the recent window.
- ``outcomes``: reward against strict and held-out accuracy (``reward_hacking``, ``forgetting``,
  ``overfitting``).
- ``programs``: the programs written for the ``code`` task, run by the task's own interpreter
  (``hardcoding``); rollouts of other tasks are ignored.
- ``tools``: the turns of multi-turn episodes (``answer_leak``); rollouts without turns are ignored.
- ``recipe``: the run's recipe itself against each knob's normal range (``unusual_recipe``), not the evidence.
- ``common``: the base classes, including ``ShareDiagnostic``, the share-of-the-recent-window rule.

Cost: everything per step or per group is vectorised (pandas groupby); see ``text`` for the text checks.
"""

from __future__ import annotations

from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin.common import BuiltinDiagnostic, ShareDiagnostic
from evotrainer.diagnostics.builtin.dynamics import (
    EntropyBlowup,
    EntropyCollapse,
    GradSpike,
    KLBlowup,
    LearnsNothing,
    NonFinite,
    Plateau,
)
from evotrainer.diagnostics.builtin.groups import DeadGroups, TooEasy, TooHard
from evotrainer.diagnostics.builtin.outcomes import Forgetting, Overfitting, RewardHacking
from evotrainer.diagnostics.builtin.programs import Hardcoding, hardcoded
from evotrainer.diagnostics.builtin.recipe import UnusualRecipe
from evotrainer.diagnostics.builtin.text import (
    AnswerSpraying,
    Echo,
    LengthCollapse,
    Repetition,
    Truncation,
    count_candidates,
    echo_needles,
    echoes,
    has_repeated_run,
    repeated_ngram_share,
)
from evotrainer.diagnostics.builtin.tools import AnswerLeak, used_leak
from evotrainer.diagnostics.signals import ShareParams
from evotrainer.evidence.model import Evidence

__all__ = [
    "BUILTIN_DIAGNOSTICS", "run_all",
    "BuiltinDiagnostic", "ShareDiagnostic", "ShareParams",
    "DeadGroups", "TooHard", "TooEasy",
    "EntropyCollapse", "EntropyBlowup", "KLBlowup", "GradSpike", "NonFinite", "Plateau", "LearnsNothing",
    "Truncation", "LengthCollapse", "Repetition", "Echo", "AnswerSpraying",
    "RewardHacking", "Forgetting", "Overfitting", "Hardcoding", "AnswerLeak", "UnusualRecipe",
    "count_candidates", "hardcoded", "used_leak", "echo_needles", "echoes", "has_repeated_run", "repeated_ngram_share",
]

BUILTIN_DIAGNOSTICS: dict[str, type[Diagnostic]] = {
    cls.name: cls
    for cls in (DeadGroups, TooHard, TooEasy, EntropyCollapse, EntropyBlowup, Truncation, LengthCollapse, Repetition,
                Echo, RewardHacking, AnswerSpraying, KLBlowup, GradSpike, NonFinite, Plateau, LearnsNothing, Forgetting,
                Overfitting, Hardcoding, AnswerLeak, UnusualRecipe)
}


def run_all(ev: Evidence, names=None, params: dict[str, dict] | None = None) -> list[Finding]:
    """Run the named built-in diagnostics (all by default) with per-diagnostic ``params``
    (``{name: {param: value}}``); findings sorted critical first, then by diagnostic name."""
    names = list(BUILTIN_DIAGNOSTICS) if names is None else list(names)
    params = params or {}
    unknown = sorted({n for n in [*names, *params] if n not in BUILTIN_DIAGNOSTICS})
    if unknown:
        raise ValueError(f"unknown diagnostic(s) {', '.join(unknown)}; known: {', '.join(BUILTIN_DIAGNOSTICS)}")
    findings: list[Finding] = []
    for n in names:
        findings += BUILTIN_DIAGNOSTICS[n](params.get(n)).run(ev)
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.diagnostic))
