"""Task registry: turn a task name from a harness or the CLI into a ready :class:`Task`.

Built-in tasks are looked up by name. A user's own task needs no code: a dataset file or ``save_to_disk`` directory
given as the task name (or ``dataset`` with the option ``path``; :mod:`evotrainer.tasks.dataset`), or a
reasoning-gym dataset (``reasoning_gym`` with the option ``dataset``; :mod:`evotrainer.tasks.rgym`). Anything else can
be plugged in without editing this package by naming a :class:`Task` subclass as ``"package.module:ClassName"``. Every mistake (unknown name, missing module, a class
that is not a Task, a bad option) becomes a :class:`~evotrainer.core.errors.TaskError` that names the culprit.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from evotrainer.core.errors import TaskError
from evotrainer.tasks.agentic import AgenticOptions, AgenticTask
from evotrainer.tasks.arith import ArithOptions, ArithTask
from evotrainer.tasks.base import OptionInfo, Problem, Task, TaskInfo, TaskOptions, Verdict
from evotrainer.tasks.code import CodeOptions, CodeTask
from evotrainer.tasks.countdown import CountdownOptions, CountdownTask
from evotrainer.tasks.dataset import DatasetOptions, DatasetTask, looks_like_dataset
from evotrainer.tasks.rgym import ReasoningGymOptions, ReasoningGymTask

BUILTIN_TASKS: dict[str, type[Task]] = {
    "arith": ArithTask, "countdown": CountdownTask, "code": CodeTask, "agentic": AgenticTask,
}
SOURCE_TASKS: dict[str, type[Task]] = {"dataset": DatasetTask, "reasoning_gym": ReasoningGymTask}
"""Tasks made from the user's data or a library's generators: each needs its options (``path``, ``dataset``)."""

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
    "DatasetOptions",
    "DatasetTask",
    "ReasoningGymOptions",
    "ReasoningGymTask",
    "SOURCE_TASKS",
    "check_alphabet",
    "OptionInfo",
    "Problem",
    "Task",
    "TaskInfo",
    "TaskOptions",
    "Verdict",
    "get_task",
    "normalize_task",
    "task_form",
    "task_ref",
    "list_tasks",
    "load_task_class",
    "parse_task_options",
]

_FORMS = (
    f"built-in tasks are: {', '.join(BUILTIN_TASKS)}; a user's task is a dataset file (.jsonl, .json, .parquet, "
    ".csv) or save_to_disk directory, 'reasoning_gym' with the option dataset=NAME, or 'package.module:ClassName', "
    "a Task subclass importable from the Python path"
)


def load_task_class(name: str) -> type[Task]:
    """The Task class for a built-in ``name`` or a ``"package.module:ClassName"`` import path."""
    if not isinstance(name, str) or not name.strip():
        raise TaskError(f"task name {name!r} is empty; {_FORMS}")
    name = name.strip()
    if name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name]
    if name in SOURCE_TASKS:
        return SOURCE_TASKS[name]
    if looks_like_dataset(name):
        return DatasetTask
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

    ``options`` (a dict; values may be strings from the CLI) are validated by the task's Options model. A dataset
    path as the name is the ``dataset`` task with that ``path``.
    """
    cls = load_task_class(name)
    if cls is DatasetTask and name.strip() not in SOURCE_TASKS:
        options = {**(options or {}), "path": name.strip()}
    return cls(options)


def task_ref(value: Any) -> tuple[str, dict[str, Any]]:
    """A spec's ``task`` as (name, options): a name or path as it is, or a mapping in one of the forms
    ``{reasoning_gym: NAME, config: {...}, ...}`` and ``{dataset: PATH, prompt: ..., ...}``."""
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict):
        if "reasoning_gym" in value:
            rest = {k: v for k, v in value.items() if k != "reasoning_gym"}
            return "reasoning_gym", {"dataset": value["reasoning_gym"], **rest}
        if "dataset" in value:
            rest = {k: v for k, v in value.items() if k != "dataset"}
            return "dataset", {"path": value["dataset"], **rest}
    raise TaskError(f"task {value!r} must be a name, a dataset path, {{reasoning_gym: NAME, config: {{...}}}} or "
                    "{dataset: PATH, prompt: FIELD, answer: FIELD, ...}")


def normalize_task(task: Any, options: dict[str, Any] | None, base_dir: str | None = None) -> tuple[str, dict[str, Any]]:
    """A spec's ``task`` and ``task_options`` in the one form jobs carry: a dataset path (as the name, in the mapping
    form, or as ``dataset``'s ``path``) becomes ``dataset`` with an absolute ``path``, resolved against ``base_dir``
    (a spec file's directory; default the working directory), so that a job reads the same file wherever it runs."""
    name, extra = task_ref(task)
    opts = {**extra, **(options or {})}
    beside = str(Path(base_dir) / name) if base_dir is not None and not Path(name).is_absolute() else name
    if name not in SOURCE_TASKS and name not in BUILTIN_TASKS and ":" not in name and \
            (looks_like_dataset(name) or looks_like_dataset(beside)):
        name, opts = "dataset", {"path": name, **opts}
    if name == "dataset" and isinstance(opts.get("path"), str) and opts["path"].strip():
        path = Path(opts["path"].strip()).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        opts["path"] = str(path.resolve())
    return name, opts


def task_form(data: dict[str, Any], base_dir: str | None = None) -> dict[str, Any]:
    """A spec mapping with ``task`` / ``task_options`` in normal form (:func:`normalize_task`), for a pydantic
    ``mode="before"`` validator: values of the wrong type are left for the model to report, and a task mapping of no
    known form is a ValueError (so the error names the file and the field)."""
    task, opts = data.get("task"), data.get("task_options")
    if not isinstance(task, (str, dict)) or not isinstance(opts, (dict, type(None))):
        return data
    if isinstance(task, str) and not task.strip():
        return data
    try:
        name, merged = normalize_task(task, opts, base_dir)
    except TaskError as exc:
        raise ValueError(str(exc)) from None
    return {**data, "task": name, "task_options": merged}


def check_alphabet(task: Task, problems: list[Problem], alphabet: frozenset[str] | set[str], policy: str) -> None:
    """A TaskError naming the first row whose prompt or answer has a character outside ``alphabet`` (the built-in
    character-level policies' vocabulary), the character, and the policies that would take it."""
    for p in problems:
        for field, text in (("prompt", p.prompt), ("answer", p.answer)):
            bad = next((ch for ch in text if ch not in alphabet), None)
            if bad is not None:
                raise TaskError(
                    f"task '{task.name}': problem {p.id!r} has {bad!r} (U+{ord(bad):04X}) in its {field}, outside the "
                    f"alphabet of the built-in character-level policy '{policy}' (printable ASCII and newline); a "
                    "policy with a real tokenizer takes any text: policy pretrained: smollm2-135m-instruct, or "
                    "path: a local Hugging Face model")


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
