"""What every ``evotrainer`` sub-command shares: the consoles, the --home/--json options, the error guard.

A module of its own so that sub-apps in other modules (``cli.skills``) use the same options and exit codes
as ``cli`` without importing it (``cli`` registers them at import time, which would be circular).

``--json`` is a promise to scripts: exactly one JSON document on stdout, whatever happens. ``guard(fn,
as_json=True)`` keeps it: while the command runs, stdout — Python's and file descriptor 1, which child
processes and native code inherit — goes to stderr; the document the command emits (checked against its
shape in ``evotrainer.reports.shapes``) is printed when it is done, or an ``error`` document if it failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from evotrainer.core.errors import EvoError

err_console = Console(stderr=True)
out_console = Console()

HomeOpt = typer.Option(None, "--home", help="State directory (default: $EVOTRAINER_HOME, else ./runs).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


_captured: list[Any] | None = None  # the documents of the --json command running now (see guard)


def seconds(upper: float):
    """A typer callback for an option in seconds: finite, and at most ``upper`` (``nan`` and ``inf`` pass a
    ``min=`` bound, so they are refused here with the allowed range)."""
    import math

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value <= upper):
            raise typer.BadParameter(f"{value!r} is not a number of seconds; give a finite value up to {upper:g}")
        return value

    return check


def emit_json(doc: Any, shape: str | None = None) -> None:
    """Print ``doc`` as the command's JSON document (held until the command ends, inside ``guard(as_json=True)``).

    ``shape``: its name in ``evotrainer.reports.shapes.SHAPES``; the document is checked against it, so what a script
    reads is what ``evotrainer schema`` documents. A mismatch is a bug of ours: it is reported on stderr, and the
    document is printed all the same (``tests/test_cli_json.py`` fails on it).
    """
    if shape is not None:
        from pydantic import ValidationError
        from rich.markup import escape

        from evotrainer.reports.shapes import SHAPES

        try:
            SHAPES[shape].model_validate(json.loads(json.dumps(doc, default=str)))
        except ValidationError as err:
            err_console.print(f"[yellow]warning:[/] this JSON document does not match its documented shape "
                              f"'{shape}' (please report it): {escape(str(err))}", highlight=False)
    if _captured is not None:
        _captured.append(doc)
        return
    _write_json(doc)


def _write_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def _stdout_to_stderr(docs: list[Any]) -> Iterator[None]:
    global _captured
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None
    previous, _captured = _captured, docs
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _captured = previous
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def guard(fn: Callable[[], None], as_json: bool = False) -> None:
    """Run a command body; a user error (``EvoError``) prints one red line and exits with its code.

    ``as_json``: the body's output and its children's go to stderr, and exactly one JSON document reaches
    stdout — the one the body emitted, or ``{"error": {type, message, exit_code}}`` when it failed.
    """
    if not as_json:
        try:
            fn()
        except EvoError as err:
            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)  # text, not markup
            raise typer.Exit(code=err.exit_code) from None
        return
    docs: list[Any] = []
    code = 0
    with _stdout_to_stderr(docs):
        try:
            fn()
        except EvoError as err:
            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)  # text, not markup
            docs[:] = [{"error": {"type": type(err).__name__, "message": str(err), "exit_code": err.exit_code}}]
            code = err.exit_code
        except typer.Exit as ex:
            code = ex.exit_code
    if len(docs) != 1:
        raise RuntimeError(f"a --json command must print exactly one JSON document; this one made {len(docs)}")
    _write_json(docs[0])
    if code:
        raise typer.Exit(code=code)
