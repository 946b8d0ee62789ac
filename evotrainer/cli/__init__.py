"""The ``evotrainer`` command line (Typer + rich), one module per command group.

- ``app``: the Typer app and the core commands (train, diagnose, campaign, review, harness, schema, …);
- ``evidence``: ``evidence contract``, ``watch`` and the evidence-mapping options shared with ``diagnose``;
- ``skills``: the skill library commands;
- ``ui``: the review dashboard;
- ``common``: options, consoles, the error guard and ``--json`` output every group shares.

``python -m evotrainer.cli`` and the ``evotrainer`` script both run :func:`main`.
"""

from __future__ import annotations

from typing import Any

from evotrainer.cli.app import app, main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    """``campaign_summary`` lives in ``evotrainer.reports`` (shared with the UI); importable from here as before."""
    if name == "campaign_summary":
        from evotrainer.reports import campaign_summary

        return campaign_summary
    raise AttributeError(f"module 'evotrainer.cli' has no attribute '{name}'")
