"""Where EvoTrainer keeps its state: one home directory, so a campaign can be moved or wiped as a unit.

Resolution order: an explicit ``--home``, then ``$EVOTRAINER_HOME``, then ``./runs``. Everything a job
writes lives below it: the MLflow SQLite database and artifact store, job directories (checkpoints,
metrics, rollouts), and the cache of warm-started base policies.
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_home(home: str | Path | None = None) -> Path:
    raw = home if home is not None else os.environ.get("EVOTRAINER_HOME") or "runs"
    path = Path(raw).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def jobs_dir(home: Path) -> Path:
    return home / "jobs"
