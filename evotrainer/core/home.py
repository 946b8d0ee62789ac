"""Where EvoTrainer keeps its state: one home directory, so a campaign can be moved or wiped as a unit.

Resolution order: an explicit ``--home``, then ``$EVOTRAINER_HOME``, then ``./runs``. Everything a job
writes lives below it: the MLflow SQLite database and artifact store, job directories (checkpoints,
metrics, rollouts), and the cache of warm-started base policies.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evotrainer.core.errors import ConfigError, RunNotFound


def resolve_home(home: str | Path | None = None) -> Path:
    """The home directory, created if missing; a ConfigError (exit 2) naming it when it is a file or cannot be made."""
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


def resolve_run(home: Path, ref: str) -> Path:
    """A job directory from a run name, an MLflow run id, a path, or ``latest``. RunNotFound otherwise."""
    p = Path(ref).expanduser()
    if (p / "meta.json").is_file():
        return p.resolve()
    root = jobs_dir(home)
    if ref == "latest" and root.is_dir():
        runs = [d for d in root.iterdir() if (d / "meta.json").is_file() and not d.name.startswith(".")]
        if runs:
            return max(runs, key=lambda d: (d / "meta.json").stat().st_mtime)
    if (root / ref / "meta.json").is_file():
        return root / ref
    if root.is_dir():
        for d in root.iterdir():
            mf = d / "meta.json"
            if mf.is_file():
                try:
                    if json.loads(mf.read_text(encoding="utf-8")).get("run_id") == ref:
                        return d
                except (OSError, ValueError, AttributeError, RecursionError):  # a damaged record is not this run
                    continue
    known = sorted(d.name for d in root.iterdir()) if root.is_dir() else []
    hint = f"; known runs: {', '.join(known[-5:])}" if known else "; this home has no runs yet"
    raise RunNotFound(f"no run '{ref}' under {root} (give a run name, an MLflow run id or a job directory{hint})")


