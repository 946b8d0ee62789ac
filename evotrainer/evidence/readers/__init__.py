"""Readers: one ``Evidence`` from whatever made the run (EvoTrainer, an MLflow run, TRL, verl).

Why: diagnostics read one evidence model (metrics under TRL's names, rollouts in ``ROLLOUT_SCHEMA``
columns) and never care who made the run. Each reader maps its tool's files onto that model and leaves
out what the tool does not record (a missing ``correct`` column makes diagnostics say "not enough
evidence" instead of guessing). Unreadable files and malformed lines are skipped and listed in
``Evidence.meta["skipped"]`` ("path: reason" or "path:line: reason"); the files of which nothing at all could be
read are also in ``Evidence.meta["unreadable"]``. :func:`require_readable` turns evidence that is all unreadable
into an error (``diagnose`` must not report "no finding" on files it could not read); nothing here executes or
unpickles anything.

Each tool is one reader (``readers/base.py``: the ``Reader`` seam); :func:`load_evidence` asks them in turn.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from evotrainer.core.errors import RunNotFound
from evotrainer.core.home import resolve_run
from evotrainer.evidence.mapping import FieldMap
from evotrainer.evidence.model import Evidence
from evotrainer.evidence.readers.base import ACCEPTED, FileCache, Reader, describe_skipped, require_readable
from evotrainer.evidence.readers.mlflow_run import read_mlflow_run
from evotrainer.evidence.readers.ours import OursReader, read_job_dir
from evotrainer.evidence.readers.trl_dir import TrlReader, read_trl_dir
from evotrainer.evidence.readers.verl_dir import VerlReader, read_verl_dir

READERS: tuple[Reader, ...] = (OursReader(), TrlReader(), VerlReader())
"""Asked in this order: a directory of several kinds is read as the first that matches."""

_RUN_ID = re.compile(r"[0-9a-f]{32}")




def load_evidence(ref: str | Path, home: Path | None = None, fields: FieldMap | None = None,
                  cache: FileCache | None = None) -> Evidence:
    """Evidence from a job dir, a job name / run id under ``home``, an MLflow run id, a TRL or verl dir; ``fields``:
    the user's names for contract fields (applied before correctness is looked for); ``cache``: reuse what was
    read of unchanged files (``watch`` re-reads a growing run every second)."""
    p = Path(ref).expanduser()
    if p.is_dir():
        reader = next((r for r in READERS if r.matches(p)), None)
        if reader is None:
            raise RunNotFound(f"{p} holds no run files we know; accepted: {ACCEPTED}")
        return reader.read(p, fields, cache)
    if home is not None:
        try:
            return read_job_dir(resolve_run(home, str(ref)), fields, cache)
        except RunNotFound:
            pass
        if _RUN_ID.fullmatch(str(ref)) and (os.environ.get("EVOTRAINER_MLFLOW_URI") or (home / "mlflow.db").is_file()):
            return read_mlflow_run(str(ref), home, fields)
    where = f" (home {home})" if home is not None else " (no home given, so only directories)"
    raise RunNotFound(f"no run '{ref}'{where}; accepted: {ACCEPTED}")


def run_kind(p: Path) -> str | None:
    """'evotrainer' (a job dir, or what EvoTrainerCallback records), 'trl', 'verl', or None for a directory that
    holds none of their files (yet)."""
    return next((r.kind for r in READERS if r.matches(p)), None)


__all__ = ["ACCEPTED", "READERS", "FileCache", "Reader", "describe_skipped", "load_evidence", "read_job_dir",
           "read_mlflow_run", "read_trl_dir", "read_verl_dir", "require_readable", "run_kind"]
