"""Running one GRPO job: new, resumed after a crash, or forked from another job's checkpoint.

A job is one TRL ``GRPOTrainer.train()`` of a policy under a harness for a number of optimiser steps. It
lives in ``HOME/jobs/<name>/`` (``meta.json``, ``harness.yaml``, ``metrics.jsonl``, ``rollouts/``,
``trainer/checkpoint-*``) and in one MLflow run. Names are deterministic, cleanrl style:
``{task}__{harness}__s{seed}__{utc time}``.

Resume (``resume=RUN``, after a crash) and fork (``fork=RUN[@STEP]``, from another job's checkpoint, maybe under
another harness) read the parent through :mod:`evotrainer.jobs.lineage`, which says what each carries over.

A job directory is complete or absent, and has one writer (``jobs/jobdir.py``): a new job is assembled under
a hidden name and renamed into place once its ``meta.json`` is written, and the process that trains it
holds the directory's lock, so a second writer is refused (``JobBusy``) and a finished job is never resumed
or rewritten.

Changing the harness between segments is therefore: stop → fork with the new harness → train. The cost
is one trainer construction (see ``bench/segments.py``).
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evotrainer.config.job import JobSpec
from evotrainer.core.errors import ConfigError, JobBusy, JobFailed
from evotrainer.core.tracking import Tracker
from evotrainer.evidence.model import truncate_after
from evotrainer.jobs.jobdir import JobLock
from evotrainer.jobs.lineage import CKPT, acknowledged_checkpoints, died_at, read_meta, write_meta
from evotrainer.jobs.opening import OpenRun, open_run
from evotrainer.jobs.plan import plan_job
from evotrainer.jobs.result import JobResult, SessionAbandoned, record_pause
from evotrainer.jobs.session import Session


def run_job(
    spec: JobSpec,
    home: Path,
    resume: str | None = None,
    fork: str | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    stop_at: int | None = None,
    hold: Callable[[JobResult, int], int | None] | None = None,
) -> JobResult:
    """Run (or resume, or fork) one job to completion. Validates everything before writing anything
    (:func:`evotrainer.jobs.plan.plan_job`), then opens the run (:mod:`evotrainer.jobs.opening`) and trains one
    session (:class:`evotrainer.jobs.session.Session`); a failure is recorded in the run and raised as ``JobFailed``.

    ``stop_at`` pauses the job at that global step instead: it checkpoints there, is recorded ``paused``,
    and a later ``resume`` goes on towards its target exactly as an uninterrupted job would (the dataset,
    schedule and RNG state are the target's, so pausing changes nothing). Backtests train their branches
    this way, one look at a time, and stop the ones whose answer is already known.

    ``hold`` keeps the session alive across its pauses (``jobs/live.py``): at each one, once the pause is on disk
    exactly as a session that ended there would leave it and the run's lock is let go, ``hold(result, target)`` is
    called in the training thread and blocks; it returns the next ``stop_at`` (None: the target) to train on in
    the same Trainer, or raises ``SessionAbandoned`` to end the session without writing anything more. The session
    goes on only when it can take the lock back and the run on disk is still the pause it wrote (else
    ``SessionAbandoned``: someone resumed it meanwhile, and a later resume goes on from the checkpoint).
    """

    t_start = time.perf_counter()
    say = log or (lambda _m: None)
    plan = plan_job(spec, home, resume, fork, stop_at, say)
    tracker = Tracker(home)
    run = open_run(plan, home, tracker)
    if stop_at is not None and resume and died_at(run.run_dir, run.meta) == stop_at:
        try:
            return record_pause(run.run_dir, run.meta, tracker, stop_at, t_start)
        finally:
            run.lock.release()
    ckpts = acknowledged_checkpoints(run.run_dir, run.meta)
    start_step = max(ckpts) if ckpts else run.meta.start_step
    # from the job's own start, its at-start evaluation runs again as in a fresh start (it draws from the RNG the
    # steps after it draw from): the row an earlier session wrote there goes, so the run is the same step for step
    truncate_after(run.run_dir, start_step - 1 if start_step == run.meta.start_step else start_step)
    for d in (run.run_dir / "trainer").glob(f"{CKPT}*") if (run.run_dir / "trainer").is_dir() else []:
        if d.is_dir() and d not in ckpts.values():
            shutil.rmtree(d, ignore_errors=True)  # torn checkpoint from a killed process
    try:
        session = Session(plan, run, home, tracker, ckpts[max(ckpts)] if ckpts else None, start_step, t_start, say,
                          progress=progress, stop_at=stop_at,
                          mlflow_had=run.mlflow_had if run.mlflow_had in (-1, start_step) else None,
                          handover=_handover(run, plan.target, hold) if hold is not None else None)
        return session.train()
    except SessionAbandoned:
        raise  # a live session let go at a pause that is on disk, and the run may have another writer now
    except BaseException as err:  # record the failure, keep everything, re-raise as a clear error
        _record_failure(run, tracker, err, say)
        if isinstance(err, (KeyboardInterrupt, SystemExit, ConfigError)):
            raise
        raise JobFailed(f"run {run.name} failed at step ≥{start_step}: {run.meta.error} (traceback in "
                        f"{run.run_dir / 'error.txt'}; resume with --resume {run.name})") from err
    finally:
        run.lock.release()  # the next writer (a resume) may take the run now


def _handover(run: OpenRun, target: int, hold: Callable[[JobResult, int], int | None]):
    """A live pause (``hold``): let go of the run while the session waits; take it back, unchanged, to go on."""
    def handover(result: JobResult) -> int | None:
        written = run.meta.raw  # the pause as it is on disk
        run.lock.release()
        nxt = hold(result, target)
        try:
            run.lock = JobLock.take(run.run_dir, run.name)
        except JobBusy:
            raise SessionAbandoned(f"run {run.name} is being written by another process") from None
        if read_meta(run.run_dir).raw != written:
            raise SessionAbandoned(f"run {run.name} changed on disk while its session waited; it resumes from its "
                                   "checkpoint")
        if nxt is not None and not (result.steps_done < nxt <= target):
            raise SessionAbandoned(f"stop_at={nxt} does not lie after step {result.steps_done}")
        return nxt
    return handover


def _record_failure(run: OpenRun, tracker: Any, err: BaseException, say: Callable[[str], None]) -> None:
    """A failed (or stopped) session in the run's record, its traceback beside it, and its MLflow run ended so.
    Ctrl-C, or the process told to exit (a Ray worker whose owner died gets SystemExit), did not fail the job: it
    was stopped, and a resume goes on from its last checkpoint."""
    stopped = isinstance(err, (KeyboardInterrupt, SystemExit))
    run.meta.status = "interrupted" if stopped else "failed"
    run.meta.error = f"{type(err).__name__}: {err}"
    write_meta(run.run_dir, run.meta)
    (run.run_dir / "error.txt").write_text(traceback.format_exc())
    try:
        tracker.set_tags(run.run_id, {"evotrainer.error": run.meta.error[:4000]})
        tracker.end_run(run.run_id, "KILLED" if stopped else "FAILED")
    except Exception as track_err:  # noqa: BLE001 - the tracking server may be what failed
        say(f"could not mark the MLflow run failed: {track_err}")
