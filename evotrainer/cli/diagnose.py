"""``evotrainer diagnose`` (one run's findings) and ``evotrainer diagnostics`` (list them, revise one against a
labelled archive)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard
from evotrainer.cli.evidence import (
    CorrectnessOpt,
    DiagHarnessOpt,
    MapFileOpt,
    MapOpt,
    OnlyOpt,
    diagnosis_setup,
    field_map,
)

diag_app = typer.Typer(no_args_is_help=True, help="List diagnostics and revise them against a labelled archive.")


def diagnose_cmd(
    run: str = typer.Argument(..., help="Run name, MLflow run id, job dir, TRL output dir or verl run dir."),
    harness: Optional[Path] = DiagHarnessOpt,
    only: list[str] = OnlyOpt,
    fail_on: Optional[str] = typer.Option(
        None, "--fail-on",
        help="Exit 1 if a finding at/above this severity exists, or some evidence could not be read: warning|critical."),
    maps: list[str] = MapOpt,
    map_file: Optional[Path] = MapFileOpt,
    correctness: Optional[str] = CorrectnessOpt,
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Diagnose a run's rollout evidence: findings by severity, with example rollouts."""

    from evotrainer.core.domain import SEVERITY_RANK
    from evotrainer.core.home import resolve_home
    from evotrainer.evidence.readers import describe_skipped, load_evidence, require_readable
    from evotrainer.monitor.watch import correctness_line

    def body() -> None:
        registry = diagnosis_setup(harness, only, fail_on)  # unknown --only names fail with the known ones
        names = list(only) or None
        fmap = field_map(maps, correctness, map_file)
        ev = require_readable(load_evidence(run, resolve_home(home), fmap), run)  # exit 2 when nothing could be read
        unread = describe_skipped(ev)  # what could not be read is always said, never a silent "no finding"
        empty = not len(ev.rollouts) and (not len(ev.metrics) or "step" not in ev.metrics)
        findings = registry.run(ev, names)
        if as_json:
            _emit_json({"findings": [f.model_dump(mode="json") for f in findings], "evidence": ev.summary()}, "diagnosis")
        else:
            summ = ev.summary()
            out_console.print(f"[bold]{escape(summ['run'] or run)}[/] ({summ['source']}): {summ['steps']} steps, "
                              f"{summ['rollouts']} rollouts")
            if unread:
                out_console.print(f"[yellow]{escape(unread)}[/]", highlight=False)
            out_console.print(f"[dim]{escape(correctness_line(ev.meta if isinstance(ev.meta, dict) else {}))}[/]",
                              highlight=False)
            colours = {"critical": "red", "warning": "yellow", "info": "dim"}
            shown = [f for f in findings if f.severity != "info"]
            for f in findings:
                if f.severity == "info" and f.confidence == 0.0:
                    continue
                c = colours[f.severity]
                steps = f" steps {f.steps[0]}-{f.steps[1]}" if f.steps else ""
                out_console.print(f"[{c}]{f.severity.upper():8}[/] [bold]{f.symptom}[/] ({f.diagnostic} v{f.version},"
                                  f" confidence {f.confidence:.2f}){steps}")
                out_console.print(f"          {escape(f.explanation)}")
                if f.metrics:
                    out_console.print("          " + ", ".join(f"{k}={v:.4g}" for k, v in f.metrics.items()))
                for ex in f.examples[:3]:
                    # rollout text is untrusted: escaped, never interpreted as markup
                    out_console.print(f"          [dim]step {ex.step}[/] {escape(repr(ex.prompt))} → {escape(repr(ex.completion))}")
            if not shown and empty:
                out_console.print("[yellow]nothing to diagnose: the run has no metric step and no rollout yet[/]")
            elif not shown and unread:
                out_console.print("[yellow]nothing flagged in the evidence that could be read (the files above could "
                                  "not be)[/]")
            elif not shown:
                out_console.print("[green]no warning or critical finding[/]")
            skipped = [f.diagnostic for f in findings if f.severity == "info" and f.confidence == 0.0]
            if skipped:
                out_console.print(f"[dim]not enough evidence for: {', '.join(sorted(set(skipped)))}[/]")
        if fail_on is not None and any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on] for f in findings):
            raise typer.Exit(code=1)
        if fail_on is not None and (empty or ev.meta.get("unreadable")):  # a gate does not pass on what it could not read
            err_console.print(f"--fail-on {fail_on}: failed, because "
                              + ("the run has no evidence yet" if empty else "some evidence files could not be read"),
                              highlight=False)
            raise typer.Exit(code=1)

    _guard(body, as_json)


@diag_app.command("list")
def diagnostics_list(as_json: bool = JsonOpt) -> None:
    """Built-in diagnostics with the signal they read, their literature and parameters."""
    from evotrainer.diagnostics.registry import builtin_diagnostics

    def body() -> None:
        docs = [cls.describe() for _, cls in sorted(builtin_diagnostics().items())]
        if as_json:
            _emit_json({"diagnostics": docs}, "diagnostics")
            return
        table = Table(title="Diagnostics")
        for col in ("name", "signal", "parameters", "literature"):
            table.add_column(col, overflow="fold")
        for d in docs:
            params = "\n".join(f"{p['name']}={p['default']!r}" for p in d["params"])
            table.add_row(f"{d['name']} v{d['version']}", d["signal"], params, d["literature"])
        out_console.print(table)

    _guard(body, as_json)


@diag_app.command("revise")
def diagnostics_revise(
    name: str = typer.Argument(..., help="Diagnostic to revise."),
    archive: Path = typer.Option(..., "--archive", help="YAML labelled archive: runs: [{path, labels, invalid}]."),
    params: Optional[str] = typer.Option(None, "--params", help="Candidate parameters as a JSON object."),
    code: Optional[Path] = typer.Option(None, "--code", help="Candidate code: a Python file defining a diagnostic NAME."),
    untrusted: bool = typer.Option(True, "--untrusted/--trusted", help="Run candidate code in the sandbox (default)."),
    harness: Optional[Path] = typer.Option(None, "--harness", help="Harness whose current params are the baseline."),
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay a revision over a labelled archive; accept only if no invalid-run recall is lost and F1 improves."""
    from evotrainer.config.harness import HarnessSpec, load_harness
    from evotrainer.core.errors import ConfigError
    from evotrainer.core.home import resolve_home
    from evotrainer.diagnostics.registry import Registry, SandboxedDiagnostic, load_diagnostic_file
    from evotrainer.diagnostics.revision import Archive, evaluate_revision, record
    from evotrainer.evidence.readers import load_evidence

    def body() -> None:
        if (params is None) == (code is None):
            raise ConfigError("give exactly one of --params JSON or --code FILE")
        h = load_harness(harness) if harness else HarnessSpec()
        registry = Registry(h)
        current = registry.get(name)
        symptom = registry.classes[name].symptom if name in registry.classes else name
        hm = resolve_home(home)
        if params is not None:
            try:
                cand_params = json.loads(params)
            except json.JSONDecodeError as err:
                raise ConfigError(f"--params is not valid JSON: {err}") from None
            if not isinstance(cand_params, dict):
                raise ConfigError("--params must be a JSON object of parameter: value")
            candidate = registry.get(name, cand_params)
            desc = {"params": cand_params}
        else:
            if untrusted:
                candidate = SandboxedDiagnostic(code, name)
            else:
                classes = load_diagnostic_file(code)
                if name not in classes:
                    raise ConfigError(f"{code} defines {sorted(classes)}, not '{name}'")
                candidate = classes[name]()
            desc = {"code": str(code), "untrusted": untrusted}
        result = evaluate_revision(current, candidate, symptom, Archive.load(archive), lambda p: load_evidence(p, hm), desc)
        record(hm, result)
        if as_json:
            _emit_json(result.model_dump(mode="json"), "revision")
        else:
            verdict = "[green]accepted[/]" if result.accepted else "[red]rejected[/]"
            out_console.print(f"revision of {name}: {verdict} — {'; '.join(result.reasons)}")
            for label, sc in (("before", result.before), ("after", result.after)):
                out_console.print(f"  {label:6} P={sc.precision:.2f} R={sc.recall:.2f} F1={sc.f1:.2f} "
                                  f"invalid recall={sc.invalid_recall}")

    _guard(body, as_json)
