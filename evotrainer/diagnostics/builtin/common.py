"""The base classes of the built-ins: what every one of them needs, and the share rule most of them apply.

Six built-ins judge a share over the recent window (of groups, of completions, of rewarded completions)
against ``warning``/``critical`` levels and report it the same way: the share, the counts behind it, the
levels, the recent window's steps and a few flagged rollouts. ``ShareDiagnostic.share_finding`` is that
rule, written once, so a share diagnostic's ``analyze`` only measures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from evotrainer.diagnostics.base import Diagnostic, Example, Finding
from evotrainer.diagnostics.signals import ShareParams, Window, grade, share_confidence


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
