"""Where EvoTrainer keeps its state: one home directory, so a campaign can be moved or wiped as a unit.

Resolution order: an explicit ``--home``, then ``$EVOTRAINER_HOME``, then ``./runs``. Everything a job
writes lives below it: the MLflow SQLite database and artifact store, job directories (checkpoints,
metrics, rollouts), and the cache of warm-started base policies.
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_home(home: str | Path | None = None) -> Path:
    """The home directory, created if missing; a ConfigError (exit 2) naming it when it is a file or cannot be made."""
    from evotrainer.errors import ConfigError

    raw = home if home is not None else os.environ.get("EVOTRAINER_HOME") or "runs"
    where = "--home" if home is not None else ("$EVOTRAINER_HOME" if os.environ.get("EVOTRAINER_HOME") else "./runs")
    path = Path(raw).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"home {path} ({where}) is not a directory; give a directory for EvoTrainer's state")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"home {path} ({where}) cannot be created: {exc.strerror or exc}; give a writable "
                          "directory") from None
    return path


def jobs_dir(home: Path) -> Path:
    return home / "jobs"
