"""What a job hands back: its typed result, and the pause a killed session reached but did not record.

Apart from the runner because every caller of a job (the CLI, the launchers, a live session, the campaign) reads
this and nothing else of it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evotrainer.core.runmeta import RunMeta
from evotrainer.evidence.model import read_metrics
from evotrainer.jobs.lineage import complete_checkpoints, write_meta


class SessionAbandoned(BaseException):
    """A live session (``run_job``'s ``hold``) ended at a pause that is already on disk: nothing more is written.

    A ``BaseException``, so that nothing between the Trainer's callback and ``run_job`` records it as a failure."""


class JobResult(BaseModel):
    run_id: str
    name: str
    run_dir: str
    steps_done: int
    checkpoint: str | None
    evidence: dict[str, str]
    metrics: dict[str, float]
    status: str
    seconds: float
    train_seconds: float
    eval_seconds: float
    setup_seconds: float
    warm_start_seconds: float = 0.0  # building the warm-started base policy (0 when it was cached); not in setup


def last_metrics(mdf: Any) -> dict[str, float]:
    """Each metric's last recorded value (a job's result)."""
    return {c: float(mdf[c].dropna().iloc[-1]) for c in mdf.columns if c != "step" and mdf[c].notna().any()}


def record_pause(run_dir: Path, meta: RunMeta, tracker: Any, step: int, t_start: float) -> JobResult:
    """Record the pause at ``step`` that a job reached but did not get to write (see :func:`died_at`); nothing
    is trained, so a resumed campaign neither retrains that look nor fails it."""

    mdf = read_metrics(run_dir)
    tracker.backfill(meta.run_id, mdf, step)
    meta.status, meta.paused_at, meta.steps_done, meta.error = "paused", step, step, None
    write_meta(run_dir, meta)
    tracker.end_run(meta.run_id, "FINISHED")
    return JobResult(run_id=str(meta.run_id), name=str(meta.name), run_dir=str(run_dir), steps_done=step,
                     checkpoint=str(complete_checkpoints(run_dir)[step]),
                     evidence={"metrics": str(run_dir / "metrics.jsonl"), "rollouts": str(run_dir / "rollouts"),
                               "mlflow": tracker.uri},
                     metrics=last_metrics(mdf), status="paused", seconds=round(time.perf_counter() - t_start, 2),
                     train_seconds=0.0, eval_seconds=0.0, setup_seconds=round(time.perf_counter() - t_start, 2))
