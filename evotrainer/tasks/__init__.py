"""Task registry: turn a task name from a harness or the CLI into a ready :class:`Task`.

Built-in tasks are looked up by name; anything else can be plugged in without editing this package by naming a
:class:`Task` subclass as ``"package.module:ClassName"``. Every mistake (unknown name, missing module, a class
that is not a Task, a bad option) becomes a :class:`~evotrainer.errors.TaskError` that names the culprit.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from evotrainer.errors import TaskError
from evotrainer.tasks.agentic import AgenticOptions, AgenticTask
from evotrainer.tasks.arith import ArithOptions, ArithTask
from evotrainer.tasks.base import OptionInfo, Problem, Task, TaskInfo, TaskOptions, Verdict
from evotrainer.tasks.code import CodeOptions, CodeTask
from evotrainer.tasks.countdown import CountdownOptions, CountdownTask

BUILTIN_TASKS: dict[str, type[Task]] = {
    "arith": ArithTask, "countdown": CountdownTask, "code": CodeTask, "agentic": AgenticTask,
}

__all__ = [
    "BUILTIN_TASKS",
    "AgenticOptions",
    "AgenticTask",
    "ArithOptions",
    "ArithTask",
    "CodeOptions",
    "CodeTask",
    "CountdownOptions",
    "CountdownTask",
    "OptionInfo",
    "Problem",
    "Task",
    "TaskInfo",
    "TaskOptions",
    "Verdict",
    "get_task",
    "list_tasks",
    "load_task_class",
    "parse_task_options",
]

_FORMS = (
    f"built-in tasks are: {', '.join(BUILTIN_TASKS)}; a user task is named as 'package.module:ClassName', "
    "a Task subclass importable from the Python path"
)


def load_task_class(name: str) -> type[Task]:
    """The Task class for a built-in ``name`` or a ``"package.module:ClassName"`` import path."""
    if not isinstance(name, str) or not name.strip():
        raise TaskError(f"task name {name!r} is empty; {_FORMS}")
    name = name.strip()
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name]
    if ":" not in name:
        raise TaskError(f"unknown task '{name}'; {_FORMS}")
    module_name, _, attr_path = name.partition(":")
    if not module_name or not attr_path:
        raise TaskError(f"task '{name}' must have the form 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if (
            exc.name is not None
            and module_name.startswith(exc.name)
            and module_name[len(exc.name) :][:1] in ("", ".")
        ):
            raise TaskError(
                f"task '{name}': module '{module_name}' was not found on the Python path "
                f"(no module named '{exc.name}')"
            ) from None
        raise TaskError(f"task '{name}': importing module '{module_name}' failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure of a user module is reported cleanly
        raise TaskError(
            f"task '{name}': importing module '{module_name}' failed: {type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise TaskError(f"task '{name}': module '{module_name}' has no attribute '{attr_path}'")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TaskError(
            f"task '{name}': '{attr_path}' in module '{module_name}' is a {type(obj).__name__}, "
            "not a subclass of evotrainer.tasks.Task"
        )
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise TaskError(f"task '{name}': class '{attr_path}' is abstract; it must implement {missing}")
    return obj


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """A ready task: ``name`` is a built-in name or ``"package.module:ClassName"``.

    ``options`` (a dict; values may be strings from the CLI) are validated by the task's Options model.
    """
    return load_task_class(name)(options)


def list_tasks() -> list[TaskInfo]:
    """Self-descriptions of the built-in tasks, with their default options."""
    return [cls().info() for cls in BUILTIN_TASKS.values()]


def parse_task_options(pairs: list[str]) -> dict[str, str]:
    """``["ops=+-*", "n_operands=3"]`` -> ``{"ops": "+-*", "n_operands": "3"}`` for ``--task-opt KEY=VALUE``.

    Values stay strings here; the task's Options model coerces them (``"3"`` -> 3, ``"true"`` -> True) and
    reports bad ones. The split is at the first ``=``, so values may contain ``=``.
    """
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TaskError(f"task option {pair!r} must have the form KEY=VALUE, e.g. n_operands=3")
        if key in options:
            raise TaskError(
                f"task option '{key}' is given twice ({options[key]!r} and {value!r}); give it once"
            )
        options[key] = value.strip()
    return options
