"""``evotrainer tasks``: the built-in tasks, and ``tasks show`` to check a user's task before spending compute on it.

``show`` takes a task (a name, a dataset path, ``reasoning_gym``) with its ``--task-opt`` s, or a campaign spec, and
prints sample problems with their answers and how the verifier scores each canonical answer (it must score 1:
a verifier that refuses the dataset's own answers would train on noise), the split sizes, the levels and the fields
used. It exits 1 when a canonical answer does not score 1, and 2 (nothing trained, nothing written) when the task
or its held-out splits cannot be built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from evotrainer.cli.common import JsonOpt, err_console, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

tasks_app = typer.Typer(invoke_without_command=True, help="Tasks: the built-in ones, and a check of your own.")

CANONICAL_CHECK = 200
"""Problems of each split whose canonical answer ``show`` verifies (all of them below this many)."""


@tasks_app.callback()
def tasks_cmd(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List built-in tasks with their difficulty levels and options (``tasks show`` checks one task)."""
    if ctx.invoked_subcommand is not None:
        return
    from evotrainer.tasks import list_tasks

    def body() -> None:
        infos = [t.model_dump(mode="json") for t in list_tasks()]
        if as_json:
            _emit_json({"tasks": infos}, "tasks")
            return
        table = Table(title="Tasks")
        for col in ("task", "difficulty", "options", "description"):
            table.add_column(col)
        for t in infos:
            opts = "\n".join(f"{o['name']}={o['default']!r}: {o['description']}" for o in t["options"])
            diff = f"{t['min_difficulty']}..{t['max_difficulty']} (default {t['default_difficulty']})\n{t['difficulty_doc']}"
            table.add_row(t["name"], diff, opts, t["description"])
        out_console.print(table)
        out_console.print("Your own task: a dataset file or directory, or reasoning_gym with --task-opt dataset=NAME; "
                          "check it with `evotrainer tasks show TASK --task-opt KEY=VALUE`.")

    _guard(body, as_json)


def _resolve(task_or_spec: str, task_opt: list[str], eval_n: int | None):
    """(task name, options, EvalSpec) for a task name or path with options, or a campaign spec file."""
    from evotrainer.config.eval import EvalSpec
    from evotrainer.core.errors import ConfigError
    from evotrainer.tasks import normalize_task, parse_task_options

    p = Path(task_or_spec)
    if p.suffix.lower() in (".yaml", ".yml"):
        from evotrainer.config.campaign import load_campaign_spec

        if task_opt:
            raise ConfigError("--task-opt goes with a task, not a campaign spec: set task_options in the spec")
        spec = load_campaign_spec(p)
        ev = spec.eval if eval_n is None else spec.eval.model_copy(update={"n": eval_n})
        return spec.task, spec.task_options, ev
    name, opts = normalize_task(task_or_spec, parse_task_options(task_opt))
    return name, opts, EvalSpec(n=eval_n or 200)


def show_task(task_or_spec: str, task_opt: list[str], samples: int, eval_n: int | None) -> dict[str, Any]:
    """The document ``tasks show`` prints (see the module docstring); raises when the task cannot be built."""
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import SPLITS, split_problems

    name, opts, ev = _resolve(task_or_spec, task_opt, eval_n)
    task = get_task(name, opts)
    info = task.info()
    levels = ev.difficulty or task.default_range()
    train = task.sample("train", max(samples, CANONICAL_CHECK), seed=0, difficulty_range=tuple(levels))
    heldout = {s: split_problems(task, ev, s) for s in SPLITS}  # refuses a task too small for eval.n (exit 2)
    checked, failed = 0, []
    for p in [*train, *(q for ps in heldout.values() for q in ps[:CANONICAL_CHECK])]:
        v = task.verify(p, p.answer)
        checked += 1
        if not v.correct:
            failed.append({"id": p.id, "answer": p.answer, "reason": v.reason, "score": v.score})
    rows = []
    for p in train[:samples]:
        v = task.verify(p, p.answer)
        rows.append({"id": p.id, "difficulty": p.difficulty, "prompt": p.prompt, "answer": p.answer,
                     "messages": task.chat_messages(p),
                     "canonical": {"correct": v.correct, "score": 1.0 if v.correct and v.score is None else v.score,
                                   "reason": v.reason}})
    sizes = task.split_sizes(tuple(levels)) if hasattr(task, "split_sizes") else None
    doc: dict[str, Any] = {
        "task": name, "options": task.options.model_dump(mode="json"), "levels": list(levels),
        "all_levels": [info.min_difficulty, info.max_difficulty], "difficulty_doc": info.difficulty_doc,
        "rows": sizes, "report": getattr(task, "report", None),
        "splits": {"train_sampled": len(train), **{s: len(ps) for s, ps in heldout.items()}, "eval_n": ev.n},
        "samples": rows, "canonical_checked": checked, "canonical_failed": failed[:20], "ok": not failed,
    }
    return doc


def _print(doc: dict[str, Any]) -> None:
    out_console.print(f"[bold]{escape(doc['task'])}[/] levels {doc['levels']} of {doc['all_levels']}: "
                      f"{escape(doc['difficulty_doc'])}", highlight=False)
    if doc["report"]:
        r = doc["report"]
        out_console.print(f"rows {r['rows']}, skipped (null) {r['skipped_null']}, duplicates dropped {r['duplicates']}; "
                          f"fields {', '.join(r['columns'])}", highlight=False)
    if doc["rows"]:
        out_console.print(f"train rows {doc['rows']['train']}, held-out rows {doc['rows']['heldout']}", highlight=False)
    s = doc["splits"]
    out_console.print(f"held-out splits of eval.n={s['eval_n']}: decision {s['decision']}, selection {s['selection']}, "
                      f"confirmation {s['confirmation']} (disjoint)", highlight=False)
    table = Table(title="Samples (train split)")
    for col in ("id", "level", "prompt", "answer", "canonical"):
        table.add_column(col)
    for r in doc["samples"]:
        c = r["canonical"]
        table.add_row(escape(r["id"]), str(r["difficulty"]), escape(r["prompt"][:300]), escape(r["answer"][:80]),
                      "1" if c["correct"] else f"[red]{c['score']} {escape(c['reason'])}[/]")
    out_console.print(table)
    verdict = "every canonical answer scores 1" if doc["ok"] else \
        f"[red]{len(doc['canonical_failed'])} canonical answers do not score 1[/]"
    out_console.print(f"verifier: {doc['canonical_checked']} canonical answers checked, {verdict}")


@tasks_app.command("show")
def show_cmd(
    task_or_spec: str = typer.Argument(..., help="A task name, a dataset path, reasoning_gym, or a campaign spec."),
    task_opt: list[str] = typer.Option([], "--task-opt", help="Task option KEY=VALUE (repeatable)."),
    samples: int = typer.Option(5, "--samples", min=1, max=100, help="Sample problems shown."),
    eval_n: int | None = typer.Option(None, "--eval-n", min=1, help="Held-out problems per split (default: the "
                                      "spec's eval.n, else 200)."),
    as_json: bool = JsonOpt,
) -> None:
    """Sample problems, the verifier's score of their canonical answers, split sizes, levels and fields."""

    def body() -> None:
        doc = show_task(task_or_spec, task_opt, samples, eval_n)
        if as_json:
            _emit_json(doc, "task-show")
        else:
            _print(doc)
        if not doc["ok"]:  # the document stands (it says which), and the exit status says the task is not usable
            first = doc["canonical_failed"][0]
            err_console.print(f"[bold red]error:[/] {len(doc['canonical_failed'])} of {doc['canonical_checked']} "
                              f"canonical answers do not score 1 (first: {escape(first['id'])}: "
                              f"{escape(first['reason'])}); check the answer field and the verifier", highlight=False)
            raise typer.Exit(code=1)

    _guard(body, as_json)
