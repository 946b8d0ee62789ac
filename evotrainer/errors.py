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


class RunNotFound(EvoError):
    """A run id, name or directory that does not exist under the home."""

    exit_code = 2


class JobFailed(EvoError):
    """A training job crashed or produced non-finite values; its records are kept."""

    exit_code = 3
