"""Errors that reach a user, with the exit code the CLI gives them.

Every error a person can cause (a bad file, an unknown name, a run that does not exist) is raised as an
``EvoError`` subclass whose message names the thing at fault and what is allowed instead. The CLI turns
them into one red line and the exit code below; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class EvoError(Exception):
    """Base class for user-facing errors."""

    exit_code = 1


class ConfigError(EvoError):
    """Invalid configuration (harness, spec, option). Nothing was written."""

    exit_code = 2


class TaskError(ConfigError):
    """Unknown task, bad task option, or a task that cannot produce what was asked."""


class WarmStartFailed(ConfigError):
    """A built-in policy's warm start missed its probe target on every attempt; nothing trained on it."""


class RunNotFound(EvoError):
    """A run id, name or directory that does not exist under the home."""

    exit_code = 2


class CampaignBusy(EvoError):
    """Another live process owns the campaign (its lease); the message names it and how to stop it."""

    exit_code = 2


class JobBusy(EvoError):
    """Another process is writing the job directory (it holds the job's lock), or the job is finished."""

    exit_code = 2


class UnreadableEvidence(EvoError):
    """Files were there, but no metric step and no rollout could be read from any of them (the message lists them)."""

    exit_code = 2


class JobFailed(EvoError):
    """A training job crashed or produced non-finite values; its records are kept."""

    exit_code = 3


def _sub_model(ann):
    from pydantic import BaseModel

    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def format_validation_error(err, source: str, root, what: str) -> str:
    """A pydantic ValidationError as lines naming the file, the field path, the value and what is allowed.

    Unknown keys list the keys allowed at that place; other errors append the field's own description,
    so the message says what the field is for and what to write instead.
    """
    n = err.error_count()
    lines = [f"{source}: invalid {what} ({n} problem{'s' if n > 1 else ''})"]
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        model, field = root, None
        for part in loc[:-1] if e["type"] == "extra_forbidden" else loc:
            if model is None or not isinstance(part, str) or part not in model.model_fields:
                continue  # list indices and dict keys keep the current model
            field = model.model_fields[part]
            model = _sub_model(field.annotation) or _sub_model(next(iter(getattr(field.annotation, "__args__", ())), None))
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields) if model is not None else "(none)"
            lines.append(f"  - {path}: unknown key; allowed here: {allowed}")
            continue
        got = e.get("input")
        got_s = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
        msg = e["msg"].removeprefix("Value error, ")
        doc = field.description if field is not None and field.description else ""
        lines.append(f"  - {path}: {msg}{got_s}" + (f". {doc}" if doc else ""))
    return "\n".join(lines)
