"""The ``evotrainer`` command line (Typer + rich).

Commands that write state take ``--home`` (default ``$EVOTRAINER_HOME``, else ``./runs``); commands that
report take ``--json`` and then print exactly one JSON document on stdout (progress and logs go to
stderr). User errors (:class:`~evotrainer.errors.EvoError`) print one red message and exit with the
error's code (2 for bad input, 3 for a failed job); nothing else is swallowed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from evotrainer.errors import EvoError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="EvoTrainer: autonomous RL post-training.")
harness_app = typer.Typer(no_args_is_help=True, help="Inspect and validate harness files.")
app.add_typer(harness_app, name="harness")

err_console = Console(stderr=True)
out_console = Console()

HomeOpt = typer.Option(None, "--home", help="State directory (default: $EVOTRAINER_HOME, else ./runs).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def _emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


@app.command("tasks")
def tasks_cmd(as_json: bool = JsonOpt) -> None:
    """List built-in tasks with their difficulty levels and options."""
    from evotrainer.tasks import list_tasks

    infos = [t.model_dump(mode="json") for t in list_tasks()]
    if as_json:
        _emit_json({"tasks": infos})
        return
    table = Table(title="Tasks")
    for col in ("task", "difficulty", "options", "description"):
        table.add_column(col)
    for t in infos:
        opts = "\n".join(f"{o['name']}={o['default']!r}: {o['description']}" for o in t["options"])
        diff = f"{t['min_difficulty']}..{t['max_difficulty']} (default {t['default_difficulty']})\n{t['difficulty_doc']}"
        table.add_row(t["name"], diff, opts, t["description"])
    out_console.print(table)


@app.command("train")
def train_cmd(
    task: str = typer.Option("arith", "--task", help="Task name (see `evotrainer tasks`) or 'module:Class'."),
    harness: Path = typer.Option(Path("harnesses/grpo-baseline.yaml"), "--harness", help="Harness YAML file."),
    steps: int = typer.Option(100, "--steps", min=1, help="Optimiser steps (for --fork: steps after the fork point)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of sampling, data order and warm start."),
    task_opt: list[str] = typer.Option([], "--task-opt", help="Task option KEY=VALUE (repeatable)."),
    policy: str = typer.Option("tiny", "--policy", help="Built-in size (nano|tiny|small) or a local HF model directory."),
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
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from evotrainer.evaluation import EvalSpec
    from evotrainer.home import resolve_home
    from evotrainer.jobs.runner import JobSpec, run_job
    from evotrainer.policy import SIZES, PolicySpec
    from evotrainer.tasks import parse_task_options

    def body() -> None:
        pol: dict[str, Any] = {"size": policy} if policy in SIZES else {"path": policy}
        if sft_steps is not None:
            pol["sft_steps"] = sft_steps
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
        )
        h = resolve_home(home)
        console = err_console
        with Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}  acc {task.fields[acc]}  eval {task.fields[eval]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        ) as prog:
            bar = prog.add_task("train", total=steps, reward="-", acc="-", eval="-")

            def on_progress(step: int, total: int, last: dict[str, Any]) -> None:
                fmt = lambda k: f"{last[k]:.3f}" if k in last else "-"
                prog.update(bar, completed=step, total=total, reward=fmt("reward"), acc=fmt("accuracy"),
                            eval=fmt("eval/greedy_accuracy"))

            result = run_job(spec, h, resume=resume, fork=fork, progress=on_progress,
                             log=lambda m: console.print(f"[dim]{m}"))
        if as_json:
            _emit_json(result.model_dump(include={"run_id", "name", "steps_done", "checkpoint", "evidence", "metrics",
                                                  "status", "run_dir"}))
        else:
            out_console.print(f"[green]run {result.name}[/] finished at step {result.steps_done} "
                              f"({result.seconds:.0f}s); MLflow run {result.run_id}")
            keys = ["reward", "accuracy", "eval/greedy_accuracy", "eval/pass_at_8", "entropy", "kl"]
            out_console.print("  " + "  ".join(f"{k}={result.metrics[k]:.3f}" for k in keys if k in result.metrics))
            out_console.print(f"  evidence: {result.evidence['rollouts']}   checkpoint: {result.checkpoint}")

    _guard(body)


@harness_app.command("validate")
def harness_validate(files: list[Path] = typer.Argument(..., help="Harness YAML files."), as_json: bool = JsonOpt) -> None:
    """Validate harness files; exit 2 on the first invalid one."""
    from evotrainer.config import load_harness

    def body() -> None:
        out = []
        for f in files:
            h = load_harness(f)
            out.append({"file": str(f), "name": h.name, "version": h.version})
        if as_json:
            _emit_json({"harnesses": out})
        else:
            for o in out:
                out_console.print(f"[green]ok[/] {o['file']}  {o['name']}  version {o['version']}")

    _guard(body)


@harness_app.command("diff")
def harness_diff(a: Path, b: Path, as_json: bool = JsonOpt) -> None:
    """List the knobs that differ between two harness files."""
    from evotrainer.config import diff, load_harness

    def body() -> None:
        changes = [c.model_dump(mode="json") for c in diff(load_harness(a), load_harness(b))]
        if as_json:
            _emit_json({"a": str(a), "b": str(b), "changes": changes})
            return
        if not changes:
            out_console.print("same recipe (no knob differs)")
        for c in changes:
            out_console.print(f"{c['path']}: {c['old']!r} → {c['new']!r}")

    _guard(body)


@harness_app.command("knobs")
def harness_knobs(as_json: bool = JsonOpt) -> None:
    """Every harness knob with its default, bounds and description."""
    from evotrainer.config import knob_docs

    rows = knob_docs()
    if as_json:
        _emit_json({"knobs": rows})
        return
    table = Table(title="Harness knobs")
    for col in ("knob", "default", "bounds", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["knob"], repr(r["default"]), " ".join(f"{k}={v}" for k, v in r["bounds"].items()), r["description"])
    out_console.print(table)


def _guard(fn) -> None:
    try:
        fn()
    except EvoError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(code=err.exit_code) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
