"""``evotrainer train``: one GRPO job from the command line, its options checked against ``JobSpec``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

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


class _Bar:
    """The training progress bar on stderr. It appears with the first step, so a refused job prints its error alone."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.prog = Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"), BarColumn(),
            TextColumn("reward {task.fields[reward]}  acc {task.fields[acc]}  eval {task.fields[eval]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err_console, transient=False)
        self.bar: Any = None

    def update(self, step: int, total: int, last: dict[str, Any]) -> None:
        if self.bar is None:
            self.prog.start()
            self.bar = self.prog.add_task("train", total=total, reward="-", acc="-", eval="-")
        fmt = lambda k: f"{last[k]:.3f}" if k in last else "-"
        self.prog.update(self.bar, completed=step, total=total, reward=fmt("reward"), acc=fmt("accuracy"),
                         eval=fmt("eval/greedy_accuracy"))

    def stop(self) -> None:
        if self.bar is not None:
            self.prog.stop()


def _print_result(result: Any, as_json: bool) -> None:
    """What a finished ``train`` prints: its JSON document, or the run, its last metrics and where its files are."""
    if as_json:
        _emit_json(result.model_dump(include={"run_id", "name", "steps_done", "checkpoint", "evidence", "metrics",
                                              "status", "run_dir"}), "train")
        return
    out_console.print(f"[green]run {result.name}[/] finished at step {result.steps_done} "
                      f"({result.seconds:.0f}s); MLflow run {result.run_id}")
    keys = ["reward", "accuracy", "eval/greedy_accuracy", "eval/pass_at_8", "entropy", "kl"]
    out_console.print("  " + "  ".join(f"{k}={result.metrics[k]:.3f}" for k in keys if k in result.metrics))
    out_console.print(f"  evidence: {result.evidence['rollouts']}   checkpoint: {result.checkpoint}")


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

    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.core.errors import ConfigError
    from evotrainer.core.home import resolve_home
    from evotrainer.jobs.runner import run_job
    from evotrainer.tasks import parse_task_options
    from evotrainer.training.policy import SIZES

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
        bar = _Bar()
        try:
            result = run_job(spec, h, resume=resume, fork=fork, progress=bar.update,
                             log=lambda m: err_console.print(f"[dim]{m}"))
        finally:
            bar.stop()
        _print_result(result, as_json)

    _guard(body, as_json)
