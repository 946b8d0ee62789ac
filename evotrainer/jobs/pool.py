"""Running jobs in separate processes, so that one crashing branch cannot take the campaign down.

Backtest branches run in worker processes (``spawn``, so no CUDA/thread state is inherited). A worker
imports torch/TRL once and runs many branches, which keeps the per-branch overhead to the trainer's own
set-up. A Python exception in a branch comes back as a failed result with its message; a hard crash (a
segfault, the OOM killer) breaks the pool, which is then rebuilt while the failed branch is recorded as
failed and the others go on. On a Ray cluster the same ``run_branch`` function is what a Ray task calls.

Workers die with their owner. Each worker arms the kernel's parent-death signal and a parent-pid watchdog
(``evotrainer.core.procs.die_with_parent``) before it does anything else, so ``kill -9`` of the campaign (or the
OOM killer choosing it) ends its workers within a second instead of leaving them training on, re-parented
to init. The parent-death signal fires when the *thread* that started a worker ends, so workers are
started from a thread of the pool's own that lives exactly as long as they do. Workers ignore SIGINT (a
Ctrl-C reaches the whole terminal group; the owner decides what to do) and print to stderr, so that a
``--json`` document on the owner's stdout stays the only thing there.

A job that runs past the per-job timeout (``timeout_s``, or ``$EVOTRAINER_JOB_TIMEOUT_S``) is ended with
its worker and comes back as a failed result that says so; ``stop()`` abandons the job in flight (the
owner was asked to stop) and makes ``run`` raise ``PoolStopped`` instead of reporting a failure.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from evotrainer.config.job import JobSpec
from evotrainer.core.errors import ConfigError
from evotrainer.core.procs import die_with_parent
from evotrainer.jobs import live as sessions
from evotrainer.jobs.runner import run_job
from evotrainer.jobs.scoring import score_policies

TIMEOUT_ENV = "EVOTRAINER_JOB_TIMEOUT_S"
IDLE_EXIT_S = 0.2  # seconds an idle worker gets to exit by itself at close before it is ended
_UNSET: Any = object()


class PoolStopped(Exception):
    """``run`` was called or was running when the pool's owner asked it to stop: the job was abandoned,
    not failed (a campaign resumes it later)."""


def job_timeout_from_env() -> float | None:
    """``$EVOTRAINER_JOB_TIMEOUT_S``: seconds a job may run before it is ended and recorded failed (unset: none)."""

    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"${TIMEOUT_ENV}={raw!r}: give a number of seconds greater than 0, or unset it for no limit")
    return value


def _worker_init(parent_pid: int, threads: int | None = None) -> None:
    """First thing in every worker: die with the owner, leave Ctrl-C to the owner, keep stdout for the owner;
    ``threads``: torch's intra-op threads (set before torch is imported), so that workers side by side share the
    cores instead of each taking all of them."""

    die_with_parent(parent_pid)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)  # anything a library prints goes to stderr


def _cap_address_space(headroom_mb: int) -> tuple[int, int]:
    """Lower this process's soft RLIMIT_AS to its current size + ``headroom_mb``; returns the limits to restore."""
    import re
    import resource

    old = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as fh:
        m = re.search(r"VmSize:\s+(\d+) kB", fh.read())
    cap = (int(m.group(1)) * 1024 if m else 0) + headroom_mb * 1024 * 1024
    if old[1] != resource.RLIM_INFINITY:
        cap = min(cap, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, old[1]))
    return old


def score_branch(request: dict[str, Any], threads: int | None = None) -> dict[str, Any]:
    """Worker entry point: ``evotrainer.jobs.scoring.score_policies`` with ``threads`` torch intra-op threads (None:
    as the worker has them).

    Why a count per call: a local launcher with several workers runs a look's branches side by side, a core each, but
    a scoring call alone, and it should have every core (a job's own count, ``JobSpec.threads``, is set by the runner
    in the thread that trains it: torch's count holds per thread)."""

    try:
        if threads:
            import torch

            torch.set_num_threads(threads)
    except BaseException as err:  # noqa: BLE001 - like score_policies, never raises
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    return score_policies(request)


def run_branch(job: dict[str, Any], home: str, fork: str | None, resume: str | None,
               stop_at: int | None = None, live: int = 0) -> dict[str, Any]:
    """Worker entry point: run one job (to ``stop_at`` when given: a backtest look); never raises (the error
    is the result). ``live``: keep up to this many paused jobs alive in this process between looks, and go on in
    one when its next look is asked for (``evotrainer.jobs.live``; 0: every look is a session of its own).

    Fault injection, for the tests that show one bad branch does not stop a campaign (all unset in normal
    use; each is a regular expression over run names):

    - ``EVOTRAINER_FAIL_RUNS``: matching jobs crash hard (``os._exit``) at start;
    - ``EVOTRAINER_HANG_RUNS``: matching jobs hang at start (a stuck collective, a dead file system): only the
      per-job timeout ends them;
    - ``EVOTRAINER_OOM_RUNS``: matching jobs run with their worker's address space capped (``RLIMIT_AS``) at
      its current size + 64 MB and ask for 256 MB more: a branch that exhausts its memory;
    - ``EVOTRAINER_MEET_RUNS`` with ``EVOTRAINER_MEET_DIR`` and ``EVOTRAINER_MEET_COUNT``: matching jobs wait at
      start (up to 120 s) until that many of them have arrived, then go on; one that waits in vain fails. Jobs
      run one after another never meet, so this shows that a launcher runs jobs side by side.
    """
    import re
    import time
    import traceback

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    name = job.get("name") or ""

    def matches(env: str) -> bool:
        pattern = os.environ.get(env)
        return bool(pattern and name and re.search(pattern, name))

    if matches("EVOTRAINER_FAIL_RUNS"):
        os._exit(17)  # a hard crash, not an exception: the pool must survive it
    while matches("EVOTRAINER_HANG_RUNS"):
        time.sleep(3600)
    if matches("EVOTRAINER_MEET_RUNS"):
        here = Path(os.environ["EVOTRAINER_MEET_DIR"])
        (here / f"{name}.{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while len(list(here.iterdir())) < int(os.environ.get("EVOTRAINER_MEET_COUNT", "2")):
            if time.monotonic() > deadline:
                return {"ok": False, "error": f"{name} waited 120 s at the meeting point and nobody came"}
            time.sleep(0.05)
    try:
        restore = _cap_address_space(64) if matches("EVOTRAINER_OOM_RUNS") else None
        try:
            if restore is not None:
                bytearray(256 << 20)

            if live:

                res = sessions.run(JobSpec.model_validate(job), Path(home), fork, resume, stop_at, cap=live)
            else:

                res = run_job(JobSpec.model_validate(job), Path(home), resume=resume, fork=fork, stop_at=stop_at)
        finally:
            if restore is not None:  # before the error is formatted: that needs memory too
                import resource

                resource.setrlimit(resource.RLIMIT_AS, restore)
        return {"ok": True, "result": res.model_dump(mode="json")}
    except BaseException as err:  # noqa: BLE001 - the branch's failure is data for the decision
        memory = isinstance(err, MemoryError) or "allocate memory" in str(err).lower()
        return {"ok": False, "error": f"{'out of memory: ' if memory else ''}{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()[-4000:], "out_of_memory": memory}


def release_live() -> dict[str, Any]:
    """Worker entry point: end the paused jobs this worker keeps alive (their runs stay paused on disk)."""

    return {"ok": True, "released": sessions.release()}


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


class _Workers:
    """One executor and the thread that started its workers, which lives until they are gone.

    Linux delivers the parent-death signal when the thread that forked a worker exits, so the workers must
    not be started by a short-lived thread (a LangGraph executor thread, a request handler): this thread
    spawns them all at once (one ``_preload`` each, so the executor has nothing left to spawn later) and
    then waits for ``close``.
    """

    def __init__(self, workers: int, threads: int | None = None):
        self.executor: ProcessPoolExecutor | None = None
        self.preloads: list[Any] = []  # each worker's _preload future
        self.error: BaseException | None = None
        self._ready, self._done = threading.Event(), threading.Event()
        self._n, self._threads = workers, threads
        threading.Thread(target=self._body, name="evotrainer-pool-spawner", daemon=True).start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def _body(self) -> None:
        try:
            ex = ProcessPoolExecutor(max_workers=self._n, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                                     initargs=(os.getpid(), self._threads))
            self.preloads = [ex.submit(_preload) for _ in range(self._n)]
            self.executor = ex
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            self.error = err
        self._ready.set()
        self._done.wait()

    def warming(self) -> bool:
        """Whether a worker is still importing the training stack."""
        return any(not f.done() for f in self.preloads)

    def pids(self) -> list[int]:
        procs = getattr(self.executor, "_processes", None) or {}
        try:
            return sorted(procs)
        except RuntimeError:  # changed size while read (a worker being replaced)
            return []

    def kill(self) -> None:
        """SIGKILL every worker now (safe in a signal handler: no lock is taken)."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self, grace_s: float, idle: bool = False) -> None:
        """``idle``: no job or scoring call is in flight, so every worker's work is on disk (a job drains its
        writers and ends its MLflow run before it returns). Such workers are then ended after a short wait rather
        than left to tear their interpreter down: a spawned worker exits through ``sys.exit``, and after training
        that teardown of torch/TRL took ~2 s of every campaign's wall time (bench/log/07-campaign-vs-static-baseline.md)."""
        ex = self.executor
        procs = list((getattr(ex, "_processes", None) or {}).values()) if ex is not None else []
        manager = getattr(ex, "_executor_manager_thread", None)  # shutdown drops it
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # idle workers exit at once; a busy or stuck one is ended after the grace period
            p.join(timeout=min(grace_s, IDLE_EXIT_S) if idle else grace_s)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        # The executor's own thread joins the same workers: where it reaped one first, this thread's join saw no
        # child and returned before that thread recorded the exit, so the worker still read as alive for a moment
        # (multiprocessing.active_children() listed it). Once it is done, every worker's exit is recorded.
        if manager is not None and manager is not threading.current_thread():
            manager.join(timeout=5)
        self._done.set()


class BranchPool:
    """A one-worker-per-core process pool that survives worker crashes, hung jobs and its owner's death.

    ``timeout_s``: seconds a job may run before it is ended and returned as failed (default
    ``$EVOTRAINER_JOB_TIMEOUT_S``, unset: no limit). ``on_spawn``: called with the pids of newly started
    workers (the campaign records them in the store, so a resume can end any that outlived their owner).
    ``threads``: torch threads per worker (None: torch's default, every core). ``live``: paused jobs a worker keeps
    alive between looks (``evotrainer.jobs.live``; 0: none).
    """

    def __init__(self, workers: int = 1, timeout_s: float | None = _UNSET,
                 on_spawn: Callable[[list[int]], None] | None = None, threads: int | None = None, live: int = 0):
        self.workers, self.threads, self.live = workers, threads, live
        self._holds_live = False  # a job paused in a worker since the last release (so a release has work to do)
        self.timeout_s = job_timeout_from_env() if timeout_s is _UNSET else timeout_s
        self.on_spawn = on_spawn
        self._w: _Workers | None = None
        self._stopping = False
        self._inflight, self._lock = 0, threading.Lock()  # calls waiting on a worker (run_many calls from threads)

    def _get(self) -> ProcessPoolExecutor:
        if self._w is None:
            self._w = _Workers(self.workers, self.threads)
            if self.on_spawn is not None:
                self.on_spawn(self._w.pids())
        return self._w.executor

    def pids(self) -> list[int]:
        """Pids of the workers running now."""
        return self._w.pids() if self._w is not None else []

    def warming(self) -> bool:
        """Whether its workers were started and are still importing (a job now would wait for them)."""
        return self._w is not None and self._w.warming()

    def warm(self) -> None:
        """Start the workers and their imports now, so they overlap the caller's own set-up.

        Fire and forget: a worker that dies here breaks the pool, which ``run`` reports and rebuilds.
        """
        self._get()

    def run(self, job: dict[str, Any], home: Path, fork: str | None = None, resume: str | None = None,
            timeout_s: float | None = _UNSET, stop_at: int | None = None) -> dict[str, Any]:
        """Run one job in a worker; ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": ...}``.

        ``timeout_s`` overrides the pool's per-job timeout for this job; ``stop_at`` pauses the job at that
        global step (see ``run_job``). Raises ``PoolStopped`` after ``stop()``.
        """
        out = self._call(run_branch, job, str(home), fork, resume, stop_at, self.live, timeout_s=timeout_s)
        if self.live and out.get("ok") and (out.get("result") or {}).get("status") == "paused":
            self._holds_live = True
        return out

    def release(self) -> None:
        """End the paused jobs the workers keep alive (a backtest whose looks are over calls this)."""
        if self._holds_live and self._w is not None and not self._stopping:
            self._holds_live = False
            self._call(release_live)

    def score(self, request: dict[str, Any], timeout_s: float | None = _UNSET, threads: int | None = None) -> dict[str, Any]:
        """Greedy accuracy of saved policies on a held-out split, in a worker (``evotrainer.jobs.scoring``), with
        ``threads`` torch threads (None: the worker's own share)."""
        return self._call(score_branch, request, threads, timeout_s=timeout_s)

    def _call(self, fn: Callable[..., dict[str, Any]], *args: Any, timeout_s: float | None = _UNSET) -> dict[str, Any]:
        if self._stopping:
            raise PoolStopped("the pool was asked to stop; the job was not started")
        limit = self.timeout_s if timeout_s is _UNSET else timeout_s
        with self._lock:
            self._inflight += 1
        try:
            out = self._get().submit(fn, *args).result(timeout=limit)
        except FutureTimeout:
            self.kill()
            return {"ok": False, "error": f"timed out: the job ran longer than its {limit:g} s per-job timeout "
                                          f"(${TIMEOUT_ENV}) and was ended with its worker"}
        except BrokenProcessPool as err:
            self.close()
            if self._stopping:
                raise PoolStopped("the job in flight was abandoned: its owner was asked to stop") from None
            return {"ok": False, "error": f"worker process died: {err}"}
        except Exception as err:  # noqa: BLE001 - run_branch raised after all (e.g. its result did not pickle)
            self.close()
            return {"ok": False, "error": f"the worker could not report the job's result: {type(err).__name__}: {err}"}
        finally:
            with self._lock:
                self._inflight -= 1
        if not out["ok"] and self._stopping:
            raise PoolStopped("the job in flight was abandoned: its owner was asked to stop")
        if out.get("out_of_memory"):
            self.close()  # a worker that ran out of memory may be left in a bad state: the next job gets a new one
        return out

    def stop(self) -> None:
        """Abandon the job in flight (its worker is killed) and refuse new ones; safe in a signal handler."""
        self._stopping = True
        if self._w is not None:
            self._w.kill()

    def kill(self) -> None:
        """End every worker at once and drop the executor (the next job starts new workers)."""
        if self._w is not None:
            self._w.kill()
            self.close()

    def close(self, grace_s: float = 10.0) -> None:
        if self._w is not None:
            w, self._w = self._w, None
            w.close(grace_s, idle=self._inflight == 0 and not self._stopping)

    def __enter__(self) -> BranchPool:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.kill()  # leaving on an error: a job may still be running, and nobody will read its result
        else:
            self.close()
