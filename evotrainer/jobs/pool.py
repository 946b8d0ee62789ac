"""Running jobs in separate processes, so that one crashing branch cannot take the campaign down.

Backtest branches run in worker processes (``spawn``, so no CUDA/thread state is inherited). A worker
imports torch/TRL once and runs many branches, which keeps the per-branch overhead to the trainer's own
set-up. A Python exception in a branch comes back as a failed result with its message; a hard crash (a
segfault, the OOM killer) breaks the pool, which is then rebuilt while the failed branch is recorded as
failed and the others go on. On a Ray cluster the same ``run_branch`` function is what a Ray task calls.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any


def run_branch(job: dict[str, Any], home: str, fork: str | None, resume: str | None) -> dict[str, Any]:
    """Worker entry point: run one job; never raises (the error is the result).

    ``EVOTRAINER_FAIL_RUNS`` (a regular expression over run names) makes matching jobs crash hard
    (``os._exit``) at start: the fault injection the tests use to show that one dead branch does not stop a
    campaign. It is unset in normal use.
    """
    import os
    import re
    import traceback

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    fail = os.environ.get("EVOTRAINER_FAIL_RUNS")
    if fail and job.get("name") and re.search(fail, job["name"]):
        os._exit(17)  # a hard crash, not an exception: the pool must survive it
    try:
        from evotrainer.jobs.runner import JobSpec, run_job

        res = run_job(JobSpec.model_validate(job), Path(home), resume=resume, fork=fork)
        return {"ok": True, "result": res.model_dump(mode="json")}
    except BaseException as err:  # noqa: BLE001 - the branch's failure is data for the decision
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}


def _preload() -> bool:
    """Import the training stack in a fresh worker (~5 s of torch/transformers/TRL imports), then move
    everything imported out of the cyclic garbage collector's sight: the Trainer ends every job with a full
    ``gc.collect()`` (accelerate's ``free_memory``), which otherwise re-scans these million-odd permanent
    objects each time (~0.5 s a job)."""
    import gc

    import evotrainer.jobs.runner  # noqa: F401
    import evotrainer.jobs.trainer  # noqa: F401

    gc.collect()
    gc.freeze()
    return True


class BranchPool:
    """A one-worker-per-core process pool that survives worker crashes."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _get(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"))
        return self._pool

    def warm(self) -> None:
        """Start the workers and their imports now, so they overlap the caller's own set-up.

        Fire and forget: a worker that dies here breaks the pool, which ``run`` reports and rebuilds.
        """
        pool = self._get()
        for _ in range(self.workers):
            pool.submit(_preload)

    def run(self, job: dict[str, Any], home: Path, fork: str | None = None, resume: str | None = None) -> dict[str, Any]:
        try:
            return self._get().submit(run_branch, job, str(home), fork, resume).result()
        except BrokenProcessPool as err:
            self.close()
            return {"ok": False, "error": f"worker process died: {err}"}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> BranchPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
