"""The ``evotrainer`` command line (Typer + rich).

Commands that write state take ``--home`` (default ``$EVOTRAINER_HOME``, else ``./runs``); commands that
report take ``--json`` and then print exactly one JSON document on stdout (progress and logs go to
stderr). User errors (:class:`~evotrainer.errors.EvoError`) print one red message and exit with the
error's code (2 for bad input, 3 for a failed job); nothing else is swallowed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console, seconds
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard
from evotrainer.cli.evidence import (
    CorrectnessOpt,
    DiagHarnessOpt,
    MapFileOpt,
    MapOpt,
    OnlyOpt,
    diagnosis_setup,
    evidence_app,
    field_map,
    watch_cmd,
)
from evotrainer.cli.skills import skills_app
from evotrainer.cli.tasks import tasks_app
from evotrainer.cli.ui import ui_cmd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="EvoTrainer: autonomous RL post-training.")
harness_app = typer.Typer(no_args_is_help=True, help="Inspect and validate harness files.")
app.add_typer(harness_app, name="harness")
campaign_app = typer.Typer(no_args_is_help=True, help="Autonomous campaigns: diagnose, propose, backtest, promote.")
app.add_typer(campaign_app, name="campaign")
review_app = typer.Typer(no_args_is_help=True, help="Review proposals waiting for a person.")
app.add_typer(review_app, name="review")
diag_app = typer.Typer(no_args_is_help=True, help="List diagnostics and revise them against a labelled archive.")
app.add_typer(diag_app, name="diagnostics")

app.add_typer(skills_app, name="skills")
app.add_typer(tasks_app, name="tasks")
app.add_typer(evidence_app, name="evidence")
app.command("ui")(ui_cmd)
app.command("watch")(watch_cmd)


# the `train` option behind each field of JobSpec / PolicySpec / EvalSpec (ValidationError locations)
TRAIN_OPTIONS = {"task": "--task", "task_options": "--task-opt", "harness": "--harness", "steps": "--steps",
                 "seed": "--seed", "policy": "--policy", "sft_steps": "--sft-steps", "every": "--eval-every",
                 "n": "--eval-n", "save_every": "--save-every", "name": "--name", "device": "--device",
                 "pretrained": "--policy", "path": "--policy"}


def _option_error(err: Any, options: dict[str, str]) -> str:
    """A pydantic ValidationError of options as one line per problem: the option, the value given, the bound."""
    lines = []
    for e in err.errors():
        loc = [str(x) for x in e["loc"]]
        opt = next((options[x] for x in reversed(loc) if x in options), ".".join(loc) or "an option")
        got = e.get("input")
        shown = "" if isinstance(got, (dict, list)) else f" {got}"
        lines.append(f"{opt}{shown}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(lines)


@app.command("train")
def train_cmd(
    task: str = typer.Option("arith", "--task", help="Task name (see `evotrainer tasks`), a dataset file or directory "
                             "(with --task-opt prompt=FIELD answer=FIELD ...), reasoning_gym (--task-opt dataset=NAME) "
                             "or 'module:Class'."),
    harness: Path = typer.Option(Path("harnesses/grpo-baseline.yaml"), "--harness", help="Harness YAML file."),
    steps: int = typer.Option(100, "--steps", min=1, help="Optimiser steps (for --fork: steps after the fork point)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of sampling, data order and warm start."),
    task_opt: list[str] = typer.Option([], "--task-opt", help="Task option KEY=VALUE (repeatable)."),
    policy: str = typer.Option("tiny", "--policy", help="Built-in size (nano|tiny|small), a built-in pretrained model "
                               "(smollm2-135m-instruct) or a local HF model directory."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA when available), cpu or cuda: where the warm "
                               "start, training and evaluation run; printed with the precision at job start."),
    sft_steps: int | None = typer.Option(None, "--sft-steps", min=0, help="Warm-start steps of the built-in policy."),
    eval_every: int = typer.Option(50, "--eval-every", min=0, help="Held-out evaluation every N steps (0 = off)."),
    eval_n: int = typer.Option(200, "--eval-n", min=1, help="Held-out problems per evaluation."),
    save_every: int = typer.Option(25, "--save-every", min=1, help="Checkpoint every N steps."),
    name: str | None = typer.Option(None, "--name", help="Run name (default is derived)."),
    resume: str | None = typer.Option(None, "--resume", help="Continue an interrupted run (name, MLflow id or dir)."),
    fork: str | None = typer.Option(None, "--fork", help="Start a new run from RUN[@STEP]'s checkpoint."),
    home: Path | None = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run GRPO (TRL GRPOTrainer) on a policy under a harness, with evidence in MLflow and Parquet."""
    from pydantic import ValidationError
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.errors import ConfigError
    from evotrainer.home import resolve_home
    from evotrainer.jobs.runner import run_job
    from evotrainer.policy import SIZES
    from evotrainer.tasks import parse_task_options

    def body() -> None:
        from evotrainer.config.policy import PRETRAINED

        pol: dict[str, Any] = ({"size": policy} if policy in SIZES else {"pretrained": policy} if policy in PRETRAINED
                               else {"path": policy})
        if sft_steps is not None:
            pol["sft_steps"] = sft_steps
        try:
            spec = JobSpec(
                task=task,
                task_options=parse_task_options(task_opt),
                harness=str(harness),
                steps=steps,
                seed=seed,
                policy=PolicySpec(**pol),
                eval=EvalSpec(every=eval_every, n=eval_n),
                save_every=save_every,
                name=name,
                device=device,
            )
        except ValidationError as err:  # an option out of the job's bounds: name the option, not the model
            raise ConfigError(_option_error(err, TRAIN_OPTIONS)) from None
        h = resolve_home(home)
        console = err_console
        prog = Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}  acc {task.fields[acc]}  eval {task.fields[eval]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        bars: list[Any] = []  # the bar appears with the first step, so a refused job prints its error alone

        def on_progress(step: int, total: int, last: dict[str, Any]) -> None:
            if not bars:
                prog.start()
                bars.append(prog.add_task("train", total=total, reward="-", acc="-", eval="-"))
            fmt = lambda k: f"{last[k]:.3f}" if k in last else "-"
            prog.update(bars[0], completed=step, total=total, reward=fmt("reward"), acc=fmt("accuracy"),
                        eval=fmt("eval/greedy_accuracy"))

        try:
            result = run_job(spec, h, resume=resume, fork=fork, progress=on_progress,
                             log=lambda m: console.print(f"[dim]{m}"))
        finally:
            if bars:
                prog.stop()
        if as_json:
            _emit_json(result.model_dump(include={"run_id", "name", "steps_done", "checkpoint", "evidence", "metrics",
                                                  "status", "run_dir"}), "train")
        else:
            out_console.print(f"[green]run {result.name}[/] finished at step {result.steps_done} "
                              f"({result.seconds:.0f}s); MLflow run {result.run_id}")
            keys = ["reward", "accuracy", "eval/greedy_accuracy", "eval/pass_at_8", "entropy", "kl"]
            out_console.print("  " + "  ".join(f"{k}={result.metrics[k]:.3f}" for k in keys if k in result.metrics))
            out_console.print(f"  evidence: {result.evidence['rollouts']}   checkpoint: {result.checkpoint}")

    _guard(body, as_json)


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
    """Every harness knob with its default, bounds and description."""
    from evotrainer.config.harness import knob_docs

    def body() -> None:
        rows = knob_docs()
        if as_json:
            _emit_json({"knobs": rows}, "knobs")
            return
        table = Table(title="Harness knobs")
        for col in ("knob", "default", "bounds", "description"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["knob"], repr(r["default"]), " ".join(f"{k}={v}" for k, v in r["bounds"].items()),
                          r["description"])
        out_console.print(table)

    _guard(body, as_json)


@app.command("diagnose")
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
    from rich.markup import escape

    from evotrainer.domain import SEVERITY_RANK
    from evotrainer.home import resolve_home
    from evotrainer.readers import describe_skipped, load_evidence, require_readable
    from evotrainer.watch import correctness_line

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
    from evotrainer.diagnostics.registry import Registry, SandboxedDiagnostic, load_diagnostic_file
    from evotrainer.diagnostics.revision import Archive, evaluate_revision, record
    from evotrainer.errors import ConfigError
    from evotrainer.home import resolve_home
    from evotrainer.readers import load_evidence

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


def _say(as_json: bool):
    return (lambda m: err_console.print(f"[dim]{m}", highlight=False)) if as_json else (
        lambda m: out_console.print(m, highlight=False))


@campaign_app.command("start")
def campaign_start(
    spec: Path = typer.Argument(..., help="Campaign spec YAML (see campaigns/arith-demo.yaml)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="At a review, wait for a person instead of exiting."),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", min=1, help="Stop after N rounds (resume continues)."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Override the spec's seed (mainline data order, "
                                       "the brain's draws, and the warm start unless policy.seed is set)."),
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Start a campaign and run it until it finishes (or waits for a review with --no-wait)."""
    from evotrainer.agent.campaign import start_campaign
    from evotrainer.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        cid = start_campaign(spec, h, log=_say(as_json), wait=wait, max_rounds=max_rounds, seed=seed)
        _print_status(h, cid, as_json)

    _guard(body, as_json)


@campaign_app.command("resume")
def campaign_resume(
    cid: str = typer.Argument(..., help="Campaign id."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="At a review, wait for a person instead of exiting."),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", min=1, help="Stop after N rounds in total."),
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Continue a campaign from where it stopped (a kill, a stop, a review). Exit 2 if another process runs it."""
    from evotrainer.agent.campaign import run_campaign
    from evotrainer.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        run_campaign(cid, h, log=_say(as_json), wait=wait, max_rounds=max_rounds)
        _print_status(h, cid, as_json)

    _guard(body, as_json)


@campaign_app.command("status")
def campaign_status(cid: Optional[str] = typer.Argument(None, help="Campaign id (default: all)."),
                    home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Lineage, budget spent and every decision with its reason."""
    from evotrainer.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        if cid is None:
            from evotrainer.store import Store

            camps = Store.for_home(h).list_campaigns()
            if as_json:
                _emit_json({"campaigns": [c.model_dump(mode="json") for c in camps]}, "campaigns")
                return
            if not camps:
                out_console.print("no campaigns yet: evotrainer campaign start campaigns/arith-demo.yaml")
            for c in camps:
                owner = f"  owner pid {c.owner.pid} on {c.owner.host}" if c.owner and c.owner.live else ""
                out_console.print(f"{c.id}  {c.status}  mainline {c.mainline_version}{owner}", highlight=False)
            return
        _print_status(h, cid, as_json)

    _guard(body, as_json)


@campaign_app.command("stop")
def campaign_stop(cid: str,
                  now: bool = typer.Option(False, "--now", help="End the owner and its workers at once (SIGKILL)."),
                  wait_s: float = typer.Option(30.0, "--wait", min=0, callback=seconds(86400), help="Seconds to wait for the owner to exit."),
                  home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Stop a campaign: its owner abandons the job in flight and exits (resume continues it); --now kills it at once."""
    from evotrainer.agent.campaign import stop_campaign
    from evotrainer.home import resolve_home

    def body() -> None:
        res = stop_campaign(cid, resolve_home(home), now=now, wait_s=wait_s)
        if as_json:
            _emit_json(res.model_dump(mode="json"), "stop")
            return
        out_console.print(f"campaign {cid}: {res.message}", highlight=False)

    _guard(body, as_json)


@campaign_app.command("confirm")
def campaign_confirm(cid: str, seed: Optional[int] = typer.Option(None, help="Seed of the fresh problems (default eval.seed + 1)."),
                     n: Optional[int] = typer.Option(None, "--n", help="Problems to evaluate (default: the spec's "
                                                     "confirm_n, else eval.n); more narrow the gain's s.e."),
                     home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Evaluate the base policy and the mainline on fresh held-out problems (none the campaign decided on)."""
    from evotrainer.agent.confirm import confirm
    from evotrainer.home import resolve_home

    def body() -> None:
        c = confirm(resolve_home(home), cid, seed, n=n)
        if as_json:
            _emit_json(c.model_dump(mode="json"), "confirmation")
            return
        out_console.print(f"{cid}: {c.describe()}", highlight=False)

    _guard(body, as_json)


@campaign_app.command("rollback")
def campaign_rollback(cid: str, version: str = typer.Argument(..., help="Policy version id (see campaign status)."),
                      home: Optional[Path] = HomeOpt) -> None:
    """Return the mainline to an earlier policy version (and its harness); exit 2 while a process runs the campaign."""
    from evotrainer.agent.campaign import rollback
    from evotrainer.home import resolve_home

    _guard(lambda: (rollback(cid, version, resolve_home(home), log=_say(False)),
                    out_console.print(f"{cid}: mainline is now {version}")))


def _print_status(home: Path, cid: str, as_json: bool) -> None:
    from collections import Counter

    from evotrainer.reports import campaign_summary

    doc = campaign_summary(home, cid)
    if as_json:
        _emit_json(doc, "campaign")
        return
    c = doc["campaign"]
    out_console.print(f"[bold]{c['id']}[/] {c['status']}  budget {doc['budget']['spent']}/{doc['budget']['total']} steps"
                      f"  held-out accuracy {doc['accuracy']['start']} → {doc['accuracy']['end']}")
    o = c.get("owner")
    if c["status"] == "running" and o:
        out_console.print(f"owner: pid {o['pid']} on {o['host']} ({o['purpose']}, heartbeat {o['heartbeat']})",
                          highlight=False)
    elif c["status"] == "interrupted":
        dead = f" (owner pid {o['pid']} on {o['host']} is gone)" if o else ""
        out_console.print(f"[yellow]interrupted[/]: no process runs it{dead}; continue with: {doc['resume']}",
                          highlight=False)
    elif doc["resume"]:
        out_console.print(f"continue with: {doc['resume']}", highlight=False)
    if doc["confirmation"] is not None:
        from evotrainer.agent.confirm import Confirmation

        out_console.print("confirmed on " + Confirmation.model_validate(doc["confirmation"]).describe(), highlight=False)
    out_console.print("[bold]lineage[/]")
    for pv in doc["lineage"]:
        out_console.print(f"  {pv['id']}  step {pv['step']}  harness {pv['harness_version']}  "
                          f"eval {pv['eval_accuracy']}  ← {pv['parent_id']}")
    for k in doc["kept"]:
        m = k.get("merged") or {}
        if m.get("kept"):
            seeds = ", ".join(f"{x['selection_accuracy']}" for x in k["candidates"])
            out_console.print(f"  [bold]kept[/] round {k['round']}: {k['chosen']}, the average of the {len(m['from'])} "
                              f"{k['arm']} seeds (step {m['step']}, selection split {m['selection_accuracy']}; the seeds "
                              f"{seeds})", highlight=False)
            continue
        chosen = next((x for x in k["candidates"] if x["run"] == k["chosen"]), {})
        others = ", ".join(f"{x['selection_accuracy']}" for x in k["candidates"] if x["run"] != k["chosen"])
        avg = f"; their average {m['selection_accuracy']}, below every seed" if m else ""
        out_console.print(f"  [bold]kept[/] round {k['round']}: {k['chosen']} ({k['arm']} arm, step {chosen.get('step')}, "
                          f"selection split {chosen.get('selection_accuracy')}; the others {others or 'none'}{avg})",
                          highlight=False)
    for h in doc["held"]:
        out_console.print(f"  [bold]held[/] round {h['round']}: no backtest, the mainline still improving "
                          f"({h['before']:.3f} → {h['after']:.3f} on the selection split over {h['steps']} steps, "
                          f"{h['gain'] / h['se']:.1f} s.e. > budget.improving_z {h['z']:g})", highlight=False)
    for m in doc["explore_modes"]:
        out_console.print(f"  [bold]{'healthy' if m['healthy'] else 'troubled'}[/] round {m['round']}: {m['reason']}; "
                          f"branches not kept may take {m['allowance']:g} steps in all (share {m['share']:g})",
                          highlight=False)
    for m in doc["movements"]:
        if m["stuck"]:
            out_console.print(f"  [bold]stuck[/] round {m['round']}: {m['reason']}; only changes that enlarge the "
                              "update may be backtested", highlight=False)
    for r in doc["rollbacks"]:
        if r["auto"]:
            out_console.print(f"  [bold]rolled back[/] round {r['round']}: {r['from']} ({r['from_accuracy']:.3f}) fell "
                              f"more than {r['margin']:.3f} below {r['to']} ({r['to_accuracy']:.3f})", highlight=False)
        else:
            out_console.print(f"  [bold]rolled back[/] by hand to {r['to']}", highlight=False)
    out_console.print("[bold]decisions[/]")
    for d in doc["decisions"]:
        out_console.print(f"  {d['proposal_id']}  {d['knob']}={d['new']!r}: [bold]{d['outcome']}[/] — {'; '.join(d['reasons'])}",
                          highlight=False)
    if not doc["decisions"]:
        out_console.print("  none yet")
    if len(doc["versions"]) > 1:
        out_console.print("[bold]harness versions[/] (each one change)")
        for v in doc["versions"][1:]:
            changes = ", ".join(f"{c['path']} {c['old']!r} → {c['new']!r}" for c in v["diff"])
            out_console.print(f"  {v['version']}  {changes}  (from {v['policy']})", highlight=False)
    for r in doc["revisions"]:
        verdict = "adopted" if r["accepted"] else "not adopted"
        out_console.print(f"[bold]diagnostic revision[/] {r['misfire']['kind']}: {verdict} — {'; '.join(r['reasons'][:2])}",
                          highlight=False)
    outcomes = Counter(d["outcome"] for d in doc["decisions"])
    if outcomes:
        out_console.print("[bold]summary[/] " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
                          + f"; {len(doc['versions']) - 1} harness version(s) after the start")
    sp = doc["spend"]
    if sp["spent"]:
        out_console.print(f"[bold]budget[/] {sp['spent']} steps: {sp['mainline_segments']} mainline segments + "
                          f"{sp['kept_branches']} in kept branches (the mainline's own steps: useful share "
                          f"{sp['useful_share']:.0%}), {sp['discarded']} in branches not kept; {sp['screened']} "
                          f"change(s) screened out on recorded rollouts (0 steps)", highlight=False)
    js = doc["seconds"]
    if js["jobs"]:
        out_console.print(f"[bold]job seconds[/] {js['jobs']:.0f} s in {js['sessions']} job session(s): trainer "
                          f"{js['trainer']:.0f} s, held-out evaluation {js['eval']:.0f} s, setup {js['setup']:.0f} s, "
                          + (f"warm start {js['warm_start']:.0f} s, " if js.get("warm_start") else "")
                          + f"other {js['other']:.0f} s", highlight=False)
    ps = doc["process_seconds"]
    if ps["laps"]:
        top = ", ".join(f"{k} {v:.0f} s" for k, v in list(ps["own"].items())[:4])
        out_console.print(f"[bold]campaign process[/] {ps['own_total']:.0f} s of its own work ({top}); waited "
                          f"{ps['jobs']:.0f} s on job sessions and {ps['scoring']:.0f} s on scoring in the worker",
                          highlight=False)
    out_console.print("[bold]where to look[/]")
    out_console.print(f"  MLflow UI:  mlflow ui --backend-store-uri {doc['where']['mlflow']}", highlight=False)
    out_console.print(f"  state DB:   {doc['where']['state']}", highlight=False)
    out_console.print(f"  runs:       {home / 'jobs'}   archive: {home / 'campaigns' / c['id'] / 'archive.yaml'}", highlight=False)


@review_app.command("list")
def review_list(home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Proposals waiting for a person, oldest first."""
    from evotrainer.home import resolve_home
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
    from rich.markup import escape

    from evotrainer.home import resolve_home
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
    from evotrainer.home import resolve_home
    from evotrainer.reports import AFTER_REVIEW, record_review
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


@app.command("schema")
def schema_cmd(name: Optional[str] = typer.Argument(None, help="A shape name (default: list them all)."),
               as_json: bool = JsonOpt) -> None:
    """The JSON Schema of what each --json command prints (see evotrainer/shapes.py)."""
    from evotrainer.shapes import schema_entries

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
