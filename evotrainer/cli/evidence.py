"""``evotrainer evidence contract`` and ``evotrainer watch``, and the field-map options ``diagnose`` shares with them.

A module of its own, like ``cli.skills``: the evidence contract (what the diagnostics consume,
:mod:`evotrainer.diagnostics.contract`) and live diagnosis (:mod:`evotrainer.monitor.watch`) are what a user who never runs
a campaign needs, and they share the options that map a run's own names onto the contract
(:class:`evotrainer.evidence.mapping.FieldMap`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console, seconds
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

evidence_app = typer.Typer(no_args_is_help=True, help="The evidence contract: what the diagnostics consume.")

MapOpt = typer.Option([], "--map", help="FIELD=NAME: the run's own column or metric for a contract field (repeatable; "
                      "see `evotrainer evidence contract`), e.g. --map correct=is_right.")
MapFileOpt = typer.Option(None, "--map-file", help="YAML file: map: {FIELD: NAME} and/or correctness: NAME.")
CorrectnessOpt = typer.Option(None, "--correctness", help="The run's strict-correctness signal: a 0/1 column, reward "
                              "function or metric (fills 'correct' and/or 'accuracy').")
DiagHarnessOpt = typer.Option(None, "--harness", help="Harness whose diagnostic params/user files apply.")
OnlyOpt = typer.Option([], "--only", help="Run only these diagnostics (repeatable).")


def field_map(pairs: list[str], correctness: str | None, file: Path | None):
    """The FieldMap of the options, or None when none was given (ConfigError on a bad pair or file)."""
    from evotrainer.evidence.mapping import FieldMap

    if not pairs and not correctness and file is None:
        return None
    return FieldMap.from_options(pairs, correctness, file)


def diagnosis_setup(harness: Path | None, only: list[str], fail_on: str | None):
    """The registry a diagnose or watch command runs (the harness's params and user files), checking ``--only``
    names (an unknown one fails with the known ones) and ``--fail-on`` (ConfigError naming what is allowed)."""
    from evotrainer.config.harness import HarnessSpec, load_harness
    from evotrainer.core.errors import ConfigError
    from evotrainer.diagnostics.registry import Registry

    if fail_on is not None and fail_on not in ("warning", "critical"):
        raise ConfigError(f"--fail-on {fail_on!r}: use 'warning' or 'critical'")
    registry = Registry(load_harness(harness) if harness else HarnessSpec())
    for n in only:
        registry.get(n)
    return registry


def print_finding(f, prefix: str = "") -> None:
    """A finding as ``diagnose`` prints it (rollout text escaped: it is untrusted)."""
    colours = {"critical": "red", "warning": "yellow", "info": "dim"}
    steps = f" steps {f.steps[0]}-{f.steps[1]}" if f.steps else ""
    out_console.print(f"{prefix}[{colours[f.severity]}]{f.severity.upper():8}[/] [bold]{f.symptom}[/] ({f.diagnostic} "
                      f"v{f.version}, confidence {f.confidence:.2f}){steps}", highlight=False)
    out_console.print(f"          {escape(f.explanation)}", highlight=False)
    if f.metrics:
        out_console.print("          " + ", ".join(f"{k}={v:.4g}" for k, v in f.metrics.items()), highlight=False)
    for ex in f.examples[:3]:
        out_console.print(f"          [dim]step {ex.step}[/] {escape(repr(ex.prompt))} → {escape(repr(ex.completion))}",
                          highlight=False)


@evidence_app.command("contract")
def contract_cmd(as_json: bool = JsonOpt) -> None:
    """The fields the diagnostics consume (per-step metrics, per-rollout columns), which diagnostic needs which,
    and how other tools' names map onto them; --json prints it as a JSON Schema (docs/evidence-contract.schema.json)."""
    from evotrainer.diagnostics.contract import build_contract

    def body() -> None:
        doc = build_contract()
        if as_json:
            _emit_json(doc, "evidence-contract")
            return
        out_console.print(f"[bold]Evidence contract v{doc['x-contract-version']}[/]: {doc['description']}", highlight=False)
        for part, title in (("metric_step", "Per-step metrics"), ("rollout", "Per-rollout fields")):
            d = doc["$defs"][part]
            table = Table(title=title)
            for col in ("field", "type", "needed by", "read by", "meaning / other tools"):
                table.add_column(col, overflow="fold")
            props = {**d["properties"], **{v["x-pattern"]: v for v in d.get("patternProperties", {}).values()}}
            for name, prop in props.items():
                t = prop.get("type", "")
                aliases = "; ".join(f"{k}: {v}" for k, v in prop.get("x-aliases", {}).items())
                table.add_row(name, " | ".join(t) if isinstance(t, list) else str(t), ", ".join(prop.get("x-needed-by", [])),
                              ", ".join(prop.get("x-read-by", [])), prop.get("description", "") + (f"\n{aliases}" if aliases else ""))
            out_console.print(table)
        table = Table(title="What each diagnostic needs (one alternative of each line)")
        for col in ("diagnostic", "needs", "also reads"):
            table.add_column(col, overflow="fold")
        for d in doc["x-diagnostics"]:
            table.add_row(f"{d['diagnostic']} v{d['version']}", "\n".join(n["text"] if n["what"] == n["text"] else f"{n['what']}: {n['text']}"
                                                                     for n in d["needs"]),
                          ", ".join(d["reads"]))
        out_console.print(table)
        out_console.print(f"[bold]Correctness[/]: {doc['x-correctness']['description']}", highlight=False)
        out_console.print(f"[bold]Mapping[/]: {doc['x-mapping']}", highlight=False)

    _guard(body, as_json)


def watch_cmd(
    run: str = typer.Argument(..., help="Run name, job dir, a TRL output dir, a verl dump dir, or the directory an "
                              "EvoTrainerCallback writes; it may not exist yet."),
    every: int = typer.Option(1, "--every", min=1, help="Diagnose after every N new steps (and when the run ends)."),
    interval: float = typer.Option(1.0, "--interval", min=0.05, callback=seconds(3600),
                                   help="Seconds between checks of the run's files (at most 3600)."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="Exit 1 at the first finding at/above this severity: "
                                          "warning|critical."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.0, callback=seconds(10**7),
                                            help="Stop after this many seconds (exit 0 "
                                            "unless --fail-on tripped)."),
    until_finished: bool = typer.Option(False, "--until-finished", help="Stop when the run ends (our jobs and the "
                                        "callback: meta.json status; TRL: trainer_state.json at max_steps; verl: "
                                        "needs --idle)."),
    idle: Optional[float] = typer.Option(None, "--idle", min=0.0, callback=seconds(10**7),
                                         help="Stop after this many seconds without a new "
                                         "step (after a last diagnosis)."),
    harness: Optional[Path] = DiagHarnessOpt,
    only: list[str] = OnlyOpt,
    maps: list[str] = MapOpt,
    map_file: Optional[Path] = MapFileOpt,
    correctness: Optional[str] = CorrectnessOpt,
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Follow a run while it trains: re-diagnose as evidence arrives and print each new finding once."""
    from evotrainer.core.home import resolve_home
    from evotrainer.monitor.watch import Watcher, WatchOutcome

    def body() -> None:
        registry = diagnosis_setup(harness, only, fail_on)
        fmap = field_map(maps, correctness, map_file)
        w = Watcher(run, resolve_home(home), registry, list(only) or None, fmap, every=every)
        say = (lambda m: err_console.print(f"[dim]{escape(m)}[/]", highlight=False))
        stops = [x for x in (f"--fail-on {fail_on}" if fail_on else "", f"--timeout {timeout:g}s" if timeout else "",
                             "--until-finished" if until_finished else "", f"--idle {idle:g}s" if idle else "") if x]

        def on_finding(s) -> None:
            if not as_json:
                print_finding(s.finding, prefix=f"[dim]step {s.step} +{s.seconds:.1f}s[/] ")

        try:
            say(f"watching {run} every {interval:g}s, diagnosing every {every} step{'s' * (every != 1)}; stops on "
                f"{', '.join(stops) or 'Ctrl-C'}")
            out = w.run(interval=interval, fail_on=fail_on, timeout=timeout, idle=idle, until_finished=until_finished,
                        on_finding=on_finding, on_note=say)
        except KeyboardInterrupt:  # (the loop handles its own; this is a Ctrl-C before it started)
            out = WatchOutcome("interrupted", 130, [], w.evidence, w.diagnoses)
        ev = out.evidence
        steps = max([int(x["step"].max()) for x in ((ev.metrics, ev.rollouts) if ev is not None else ())
                     if "step" in x.columns and len(x)], default=0)
        why = {"fail_on": f"a finding at or above {fail_on}", "finished": "the run finished",
               "timeout": f"--timeout {timeout:g}s" if timeout else "timeout", "idle": f"no new step for {idle}s",
               "interrupted": "interrupted"}[out.stopped]
        say(f"stopped ({why}) at step {steps}: {len(out.seen)} finding{'s' * (len(out.seen) != 1)} reported, "
            f"{out.diagnoses} diagnos{'is' if out.diagnoses == 1 else 'es'}")
        if as_json:
            doc: dict[str, Any] = {
                "run": ev.run if ev is not None else run, "source": ev.source if ev is not None else None,
                "stopped": out.stopped, "exit_code": out.exit_code, "steps": steps,
                "rollouts": len(ev.rollouts) if ev is not None else 0, "diagnoses": out.diagnoses,
                "findings": [{"finding": s.finding.model_dump(mode="json"), "step": s.step, "seconds": s.seconds}
                             for s in out.seen],
                "evidence": ev.summary() if ev is not None else {}}
            _emit_json(doc, "watch")
        if out.exit_code:
            raise typer.Exit(code=out.exit_code)

    _guard(body, as_json)
