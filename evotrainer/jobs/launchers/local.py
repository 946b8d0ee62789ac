"""Jobs in crash-isolated worker processes on this machine (``evotrainer.jobs.pool``): each slot a one-worker
``BranchPool``, so a crash, a hang past the per-job timeout or an exhausted memory limit takes down one slot's
worker only; workers die with their owner (parent-death signal).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evotrainer.core.errors import ConfigError
from evotrainer.jobs.launchers.base import JobOutcome, JobRequest, _Closing
from evotrainer.jobs.pool import _UNSET, BranchPool, PoolStopped, job_timeout_from_env
from evotrainer.jobs.scoring import ScoreAnswer, ScoreRequest, join_answers, split_request


class LocalLauncher(_Closing):
    """``workers`` crash-isolated worker processes on this machine; a batch runs up to ``workers`` at a time.

    ``timeout_s``: seconds a job may run once started (default ``$EVOTRAINER_JOB_TIMEOUT_S``, unset: none).
    ``on_spawn``: called with the pids of newly started workers (the owner records them). ``live``: paused jobs each
    worker keeps alive between a backtest's looks (``evotrainer.jobs.live``; 0: none); a job's next look goes to
    the worker that holds it when that worker is free.
    """

    def __init__(self, workers: int = 1, timeout_s: float | None = _UNSET,
                 on_spawn: Callable[[list[int]], None] | None = None, live: int = 0):
        if workers < 1:
            raise ConfigError(f"launcher.workers={workers}: give 1 or more worker processes")
        timeout = job_timeout_from_env() if timeout_s is _UNSET else timeout_s
        self.workers = workers
        # side by side, each worker gets its share of the cores (alone, torch's default: all of them)
        self.cores = os.cpu_count() or 1
        self._share = max(1, self.cores // workers)  # a worker's cores when every worker runs a job
        self._slots = [BranchPool(workers=1, timeout_s=timeout, threads=self._share if workers > 1 else None, live=live)
                       for _ in range(workers)]
        self._idle = list(self._slots)
        self._free = threading.Condition()
        self._busy = 0  # cores the running jobs compute with (their torch threads)
        # what may run at once: every core, or each worker's share where there are more workers than cores
        self._capacity = max(self.cores, workers * self._share)
        self._holder: dict[str, BranchPool] = {}  # job name -> the slot whose worker keeps it paused and alive
        self._on_spawn: Callable[[list[int]], None] | None = None
        self.on_spawn = on_spawn

    @property
    def on_spawn(self) -> Callable[[list[int]], None] | None:
        return self._on_spawn

    @on_spawn.setter
    def on_spawn(self, fn: Callable[[list[int]], None] | None) -> None:
        self._on_spawn = fn
        for s in self._slots:
            s.on_spawn = fn

    def warm(self) -> None:
        for s in self._slots:
            s.warm()

    def warming(self) -> bool:
        return any(s.warming() for s in self._slots)

    def pids(self) -> list[int]:
        return sorted(p for s in self._slots for p in s.pids())

    def _take(self, prefer: BranchPool | None = None, exact: bool = False, cores: int = 0) -> BranchPool:
        """A free slot: ``prefer`` when it is free (with ``exact``, wait for it), once ``cores`` of the machine's
        cores are free too (a job alone may take more than there are: it never waits for itself)."""
        with self._free:
            while not self._idle or (exact and prefer not in self._idle) or \
                    (self._busy and self._busy + cores > self._capacity):
                self._free.wait()
            slot = prefer if prefer in self._idle else self._idle[0]
            self._idle.remove(slot)
            self._busy += cores
            return slot

    def _give(self, slot: BranchPool, cores: int = 0) -> None:
        with self._free:
            self._idle.append(slot)
            self._busy -= cores
            self._free.notify_all()  # waiters want different slots (``exact``) or cores: each checks its own

    def _needs(self, req: JobRequest) -> int:
        """Cores a job computes with: its own thread count, else its worker's share."""
        return int(req.job.threads or self._share)

    def _one(self, req: JobRequest) -> JobOutcome:
        cores = self._needs(req)
        slot = self._take(self._holder.get(req.resume or ""), cores=cores)
        try:
            out = slot.run(req.wire(), Path(req.home), fork=req.fork, resume=req.resume, stop_at=req.stop_at)
        except PoolStopped as err:
            return JobOutcome(status="stopped", error=str(err))
        finally:
            self._give(slot, cores)
        outcome = JobOutcome.from_worker(out)
        if outcome.result is not None and outcome.result.status == "paused":
            self._holder[outcome.result.name] = slot
        else:
            self._holder.pop(req.resume or req.name, None)
        return outcome

    def _cores_for(self, jobs: int) -> int | None:
        """torch threads for each of ``jobs`` jobs run at once (None with one worker: it has every core already)."""
        if self.workers == 1:
            return None
        return max(1, self.cores // min(self.workers, max(jobs, 1)))

    def shares(self, jobs: int) -> list[int | None]:
        """The cores shared among the jobs that run side by side: a lone job (a segment) gets them all, a batch
        its workers' shares. The last ``jobs % workers`` jobs of a batch larger than the workers run with workers
        idle beside them, so they share every core among themselves.

        Why: a look of 9 branches on 2 workers ran its last branch on one core beside an idle one. On two, a look
        of 10 steps took 3.5-4.3 s against 4.9-5.6 s on one for the demo's policy, 12.4 against 18.0 s for
        agentic's (bench/log/07-campaign-vs-static-baseline.md, 2026-11-29): 3-6 s less a campaign, less the wait for both cores. Such a job
        starts once the cores it needs are free (:meth:`_take`), never beside another job. It keeps its count at
        later looks, so a look in which another arm stopped but its own went on would have an odd number of
        one-core jobs, one of them alone. In the benches' homes of 2026-11-29, 4 looks of 61 had 6 branches
        after 9, each time without the last arm (a backtest lists a seed's arms in order, the control first; counted
        from the stores' branch records with a one-off script)."""
        if self.workers == 1:
            return [None] * jobs
        tail = jobs % self.workers if jobs > self.workers else 0
        return [self._cores_for(jobs)] * (jobs - tail) + ([max(1, self.cores // tail)] * tail if tail else [])

    def run_many(self, requests: list[JobRequest]) -> list[JobOutcome]:
        # a new job without a count gets its share of the batch (:meth:`shares`); one that has a count (the
        # caller's, or its record's on a resume) keeps it
        shares = self.shares(len(requests))
        requests = [r if r.job.threads or n is None else r.model_copy(update={"job": r.job.model_copy(update={"threads": n})})
                    for r, n in zip(requests, shares, strict=True)]
        if len(requests) <= 1 or self.workers == 1:
            outcomes = [self._one(r) for r in requests]
        else:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(requests)),
                                    thread_name_prefix="evotrainer-launch") as ex:
                outcomes = list(ex.map(self._one, requests))
        if any(o.status == "stopped" for o in outcomes):
            raise PoolStopped("the jobs in flight were abandoned: their owner was asked to stop")
        return outcomes

    def score(self, request: ScoreRequest) -> ScoreAnswer:
        # a campaign scores with no job running: the policies are split among the workers, which share the cores
        parts = split_request(request.model_dump(mode="json"), self.workers)
        threads = self._cores_for(len(parts))

        def one(part: dict[str, Any]) -> dict[str, Any]:
            cores = threads or self.cores
            slot = self._take(cores=cores)
            try:
                return slot.score(part, threads=threads)
            finally:
                self._give(slot, cores)

        if len(parts) == 1:
            return ScoreAnswer.model_validate(one(parts[0][0]))
        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="evotrainer-score") as ex:
            return ScoreAnswer.model_validate(join_answers(parts, list(ex.map(one, [p for p, _ in parts]))))

    def release(self) -> None:
        self._holder.clear()
        for s in self._slots:
            self._take(s, exact=True)
            try:
                s.release()
            finally:
                self._give(s)

    def stop(self) -> None:
        for s in self._slots:
            s.stop()

    def kill(self) -> None:
        for s in self._slots:
            s.kill()

    def close(self) -> None:
        for s in self._slots:
            s.close()
