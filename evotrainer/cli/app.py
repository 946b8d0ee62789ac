"""The ``evotrainer`` command line (Typer + rich).

Commands that write state take ``--home`` (default ``$EVOTRAINER_HOME``, else ``./runs``); commands that
report take ``--json`` and then print exactly one JSON document on stdout (progress and logs go to
stderr). User errors (:class:`~evotrainer.core.errors.EvoError`) print one red message and exit with the
error's code (2 for bad input, 3 for a failed job); nothing else is swallowed.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import typer
from rich.table import Table

from evotrainer.cli.campaign import campaign_app
from evotrainer.cli.common import JsonOpt, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard
from evotrainer.cli.diagnose import diag_app, diagnose_cmd
from evotrainer.cli.evidence import evidence_app, watch_cmd
from evotrainer.cli.harness import harness_app
from evotrainer.cli.review import review_app
from evotrainer.cli.skills import skills_app
from evotrainer.cli.tasks import tasks_app
from evotrainer.cli.train import train_cmd
from evotrainer.cli.ui import ui_cmd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="EvoTrainer: autonomous RL post-training.")
app.command("train")(train_cmd)
app.command("diagnose")(diagnose_cmd)
app.add_typer(harness_app, name="harness")
app.add_typer(campaign_app, name="campaign")
app.add_typer(review_app, name="review")
app.add_typer(diag_app, name="diagnostics")
app.add_typer(skills_app, name="skills")
app.add_typer(tasks_app, name="tasks")
app.add_typer(evidence_app, name="evidence")
app.command("ui")(ui_cmd)
app.command("watch")(watch_cmd)


@app.command("schema")
def schema_cmd(name: Optional[str] = typer.Argument(None, help="A shape name (default: list them all)."),
               as_json: bool = JsonOpt) -> None:
    """The JSON Schema of what each --json command prints (see evotrainer/reports/shapes.py)."""
    from evotrainer.reports.shapes import schema_entries

    def body() -> None:
        entries = schema_entries(name)
        if as_json:
            _emit_json({"schemas": [e.model_dump(mode="json", by_alias=True) for e in entries]}, "schemas")
            return
        if name is not None:
            out_console.print_json(json.dumps(entries[0].schema_))
            return
        table = Table(title="JSON shapes (evotrainer schema NAME prints one)")
        for col in ("shape", "printed by", "what"):
            table.add_column(col, overflow="fold")
        for e in entries:
            table.add_row(e.name, ", ".join(e.commands), e.description)
        out_console.print(table)

    _guard(body, as_json)


def main() -> None:
    """The ``evotrainer`` script. With ``--json``, a usage error (an option out of range, an unknown option) is an
    ``error`` document on stdout too, exit 2, so a script reading one JSON document always gets one."""
    import sys

    if "--json" not in sys.argv[1:]:
        app()
        return
    try:
        rc = app(standalone_mode=False)
    except typer.Abort:
        raise SystemExit(1) from None
    except Exception as err:  # Typer's (vendored) click UsageError: a bad option or argument, told before any work
        if not (hasattr(err, "format_message") and hasattr(err, "show") and getattr(err, "exit_code", None) == 2):
            raise
        err.show()
        _emit_json({"error": {"type": type(err).__name__, "message": err.format_message(), "exit_code": 2}}, "error")
        raise SystemExit(2) from None
    raise SystemExit(rc if isinstance(rc, int) else 0)
