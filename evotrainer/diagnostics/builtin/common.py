"""The base classes of the built-ins: what every one of them needs, and the share rule most of them apply.

Six built-ins judge a share over the recent window (of groups, of completions, of rewarded completions)
against ``warning``/``critical`` levels and report it the same way: the share, the counts behind it, the
levels, the recent window's steps and a few flagged rollouts. ``ShareDiagnostic.share_finding`` is that
rule, written once, so a share diagnostic's ``analyze`` only measures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from evotrainer.core.domain import Example, Finding
from evotrainer.diagnostics.base import Diagnostic, need
from evotrainer.diagnostics.signals import ShareParams, Window, grade, share_confidence

# ------------------------------------------------------------------------ needs shared by several built-ins
# How a user supplies each kind of evidence when a run lacks it (named in "not enough evidence" findings).
SUPPLY_CORRECT = ("a 0/1 rollout column, reward function or metric named like correct / accuracy / exact_match (found "
                  "automatically and reported), or name it: `--correctness NAME`, `--map correct=COLUMN`, "
                  "`--map accuracy=METRIC`")
SUPPLY_REWARD = "`--map reward=COLUMN` (per rollout) or `--map metric:reward=METRIC` (per step)"
SUPPLY_GROUPS = "`--map group_id=COLUMN` (the readers of our runs, TRL and verl derive it)"
SUPPLY_EVAL = ("held-out accuracy logged per evaluation as 'eval/greedy_accuracy' (or `--map "
               "eval/greedy_accuracy=METRIC`)")

NEED_REWARD = need("a reward per step", "metric:reward", "rollout:reward", supply=SUPPLY_REWARD)
NEED_SUCCESS_GROUPS = need(
    "GRPO groups with a success signal",
    "rollout:correct|reward_correctness|reward + rollout:group_id|prompt_id",
    supply=f"success: {SUPPLY_CORRECT}; groups: {SUPPLY_GROUPS}")


class BuiltinDiagnostic(Diagnostic):
    """Shared helpers; not a diagnostic itself."""

    def not_enough(self, needs: str) -> list[Finding]:
        return [self.finding("info", f"not enough evidence: needs {needs}", confidence=0.0)]


class ShareDiagnostic(BuiltinDiagnostic):
    """A share over the recent window, graded against ``Params.warning`` / ``Params.critical``."""

    Params: ClassVar[type[ShareParams]] = ShareParams
    share_metric: ClassVar[str]  # the share's key in a finding's metrics

    def share_finding(self, share: float, window: Window, of: str, says: str, *,
                      examples: list[Example] | Callable[[], list[Example]] = (),
                      counts: dict[str, float] | None = None, extra: dict[str, float] | None = None) -> list[Finding]:
        """No finding below ``warning``; else one reading "<share> of <of> in steps <lo>-<hi> <says>".

        ``examples`` may be a callable, called only when there is a finding; the metrics are the share,
        ``counts``, the two levels, then ``extra``.
        """
        p = self.params
        sev = grade(share, p.warning, p.critical)
        if sev is None:
            return []
        return [self.finding(
            sev, f"{share:.0%} of {of} in steps {window.lo}-{window.hi} {says}",
            confidence=share_confidence(share, p, window), steps=window.steps,
            examples=examples() if callable(examples) else list(examples),
            metrics={self.share_metric: share, **(counts or {}), "warning": p.warning, "critical": p.critical,
                     **(extra or {})})]
