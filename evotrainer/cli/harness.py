"""``evotrainer harness``: validate, diff and list the knobs of harness files."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from evotrainer.cli.common import JsonOpt, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

harness_app = typer.Typer(no_args_is_help=True, help="Inspect and validate harness files.")


@harness_app.command("validate")
def harness_validate(files: list[Path] = typer.Argument(..., help="Harness YAML files."), as_json: bool = JsonOpt) -> None:
    """Validate harness files (and the diagnostics their gates and params name); exit 2 on the first invalid one."""
    from evotrainer.config.harness import load_harness
    from evotrainer.diagnostics.registry import Registry

    def body() -> None:
        out = []
        for f in files:
            h = load_harness(f)
            Registry(h)  # a gate or diagnostics.params entry must name a diagnostic that exists, with its parameters
            out.append({"file": str(f), "name": h.name, "version": h.version})
        if as_json:
            _emit_json({"harnesses": out}, "harness-validation")
        else:
            for o in out:
                out_console.print(f"[green]ok[/] {o['file']}  {o['name']}  version {o['version']}")

    _guard(body, as_json)


@harness_app.command("diff")
def harness_diff(a: Path, b: Path, as_json: bool = JsonOpt) -> None:
    """List the knobs that differ between two harness files."""
    from evotrainer.config.harness import diff, load_harness

    def body() -> None:
        changes = [c.model_dump(mode="json") for c in diff(load_harness(a), load_harness(b))]
        if as_json:
            _emit_json({"a": str(a), "b": str(b), "changes": changes}, "harness-diff")
            return
        if not changes:
            out_console.print("same recipe (no knob differs)")
        for c in changes:
            out_console.print(f"{c['path']}: {c['old']!r} → {c['new']!r}")

    _guard(body, as_json)


@harness_app.command("knobs")
def harness_knobs(as_json: bool = JsonOpt) -> None:
    """Every harness knob with its default, bounds, normal range (and where it comes from) and description."""
    from evotrainer.config.harness import knob_docs

    def body() -> None:
        rows = knob_docs()
        if as_json:
            _emit_json({"knobs": rows}, "knobs")
            return
        table = Table(title="Harness knobs")
        for col in ("knob", "default", "bounds", "normal", "description"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["knob"], repr(r["default"]), " ".join(f"{k}={v}" for k, v in r["bounds"].items()),
                          f"{r['normal']} ({r['normal_source']})" if r["normal"] else "", r["description"])
        out_console.print(table)

    _guard(body, as_json)
