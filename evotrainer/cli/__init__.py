"""The ``evotrainer`` command line (Typer + rich), one module per command group.

- ``app``: the Typer app, where every group is registered, ``schema`` and :func:`main`;
- ``train``: one job; ``diagnose``: ``diagnose`` and ``diagnostics list|revise``; ``harness``: ``harness
  validate|diff|knobs``; ``campaign``: ``campaign start|resume|status|stop|confirm|rollback``; ``review``: ``review
  list|show|approve|reject``;
- ``evidence``: ``evidence contract``, ``watch`` and the evidence-mapping options shared with ``diagnose``;
- ``skills``: the skill library commands; ``tasks``: ``tasks list|show``;
- ``ui``: the review dashboard;
- ``common``: options, consoles, the error guard and ``--json`` output every group shares.

``python -m evotrainer.cli`` and the ``evotrainer`` script both run :func:`main`.
"""

from __future__ import annotations

from typing import Any

from evotrainer.cli.app import app, main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    """``campaign_summary`` lives in ``evotrainer.reports.summaries`` (shared with the UI); importable from here as before."""
    if name == "campaign_summary":
        from evotrainer.reports.summaries import campaign_summary

        return campaign_summary
    raise AttributeError(f"module 'evotrainer.cli' has no attribute '{name}'")
