"""``evotrainer review``: the proposals waiting for a person, and the verdicts on them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from evotrainer.cli.common import HomeOpt, JsonOpt, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

review_app = typer.Typer(no_args_is_help=True, help="Review proposals waiting for a person.")


@review_app.command("list")
def review_list(home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Proposals waiting for a person, oldest first."""
    from evotrainer.core.home import resolve_home
    from evotrainer.store import Store

    def body() -> None:
        pending = Store.for_home(resolve_home(home)).pending_reviews()
        if as_json:
            _emit_json({"pending": [p.model_dump(mode="json") for p in pending]}, "review-queue")
            return
        if not pending:
            out_console.print("nothing waiting for review")
        for p in pending:
            out_console.print(f"{p.id}  {p.knob}: {p.old!r} → {p.new!r}  ({p.hypothesis.symptom})", highlight=False)

    _guard(body, as_json)


@review_app.command("show")
def review_show(pid: str, home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """One proposal: hypothesis, the knob changed, cited skills, the findings behind it."""

    from evotrainer.core.home import resolve_home
    from evotrainer.store import Store

    def body() -> None:
        store = Store.for_home(resolve_home(home))
        p = store.get_proposal(pid)
        findings = store.list_findings(p.campaign_id, round=p.round)
        if as_json:
            _emit_json({"proposal": p.model_dump(mode="json"), "review": (r := store.get_review(pid)) and r.model_dump(mode="json"),
                        "findings": [f.model_dump(mode="json") for f in findings]}, "review")
            return
        h = p.hypothesis
        out_console.print(f"[bold]{p.id}[/] ({p.status}, brain {p.brain})\n  change: {escape(p.knob)} {p.old!r} → {p.new!r}"
                          f"\n  symptom: {h.symptom}\n  cause: {escape(h.cause)}\n  change: {escape(h.change)}"
                          f"\n  expected: {escape(h.expected_effect)}\n  rationale: {escape(p.rationale)}"
                          f"\n  cites: {', '.join(p.cited_skills) or '-'}", highlight=False)
        for f in findings:
            if f.severity != "info":
                out_console.print(f"  finding: {f.severity} {f.symptom}: {escape(f.explanation)}", highlight=False)

    _guard(body, as_json)


def _review(pid: str, verdict: str, comment: str, reviewer: str, home: Optional[Path]) -> None:
    from evotrainer.core.home import resolve_home
    from evotrainer.reports.summaries import AFTER_REVIEW, record_review
    from evotrainer.store import Store

    record_review(Store.for_home(resolve_home(home)), pid, verdict, comment, reviewer)
    out_console.print(f"{pid}: {verdict}d; {AFTER_REVIEW}")


@review_app.command("approve")
def review_approve(pid: str, comment: str = typer.Option("", "--comment"),
                   reviewer: str = typer.Option(os.environ.get("USER", "reviewer"), "--reviewer"),
                   home: Optional[Path] = HomeOpt) -> None:
    """Approve a proposal: it will be backtested."""
    _guard(lambda: _review(pid, "approve", comment, reviewer, home))


@review_app.command("reject")
def review_reject(pid: str, comment: str = typer.Option(..., "--comment", help="Why (recorded with the review)."),
                  reviewer: str = typer.Option(os.environ.get("USER", "reviewer"), "--reviewer"),
                  home: Optional[Path] = HomeOpt) -> None:
    """Reject a proposal with a comment: it will not be backtested."""
    _guard(lambda: _review(pid, "reject", comment, reviewer, home))
