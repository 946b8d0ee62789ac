"""What every ``evotrainer`` sub-command shares: the consoles, the --home/--json options, the error guard.

A module of its own so that sub-apps in other modules (``cli_skills``) use the same options and exit codes
as ``cli`` without importing it (``cli`` registers them at import time, which would be circular).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import typer
from rich.console import Console

from evotrainer.errors import EvoError

err_console = Console(stderr=True)
out_console = Console()

HomeOpt = typer.Option(None, "--home", help="State directory (default: $EVOTRAINER_HOME, else ./runs).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def guard(fn: Callable[[], None]) -> None:
    """Run a command body; a user error (``EvoError``) prints one red line and exits with its code."""
    try:
        fn()
    except EvoError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(code=err.exit_code) from None
