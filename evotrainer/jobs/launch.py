"""Where jobs run: one seam (``Launcher``) with two engines behind it, local worker processes and Ray.

Why a seam: a campaign's backtest round is a batch of independent jobs (every arm × every paired seed, one
look at a time). On one small machine they run one after another in a crash-isolated worker; on a machine
with several GPUs or many cores, or on a cluster, they should run side by side. The campaign does not care
which: it hands the launcher typed ``JobRequest``s and gets typed ``JobOutcome``s back, in the same order.

- ``LocalLauncher`` — ``workers`` crash-isolated processes on this machine (``evotrainer.jobs.pool``): each
  slot is a one-worker ``BranchPool``, so a crash, a hang past the per-job timeout or an exhausted memory
  limit takes down one slot's worker only (it is restarted for the next job), and the per-job timeout counts
  from the moment a slot starts the job. Workers die with their owner (parent-death signal).
- ``RayLauncher`` — each job is a Ray task (``run_branch`` is the task body) with the CPUs and GPUs the
  campaign spec gives a job; it connects to ``ray://HOST:PORT`` or ``auto`` (an existing cluster), or starts
  a local head on this machine. A task that runs past its per-job timeout (counted in its worker, so
  queueing on a busy cluster does not count) returns as failed and its worker exits; a worker that dies
  (crash, OOM killer, lost node) becomes a failed outcome with Ray's reason. Tasks belong
  to the driver that submitted them: when the campaign process dies, however it dies, Ray cancels them (its
  ownership model), and a local head started here goes with it (Ray's reaper process).

Outcomes are ``finished`` (the job ran to its target or its ``stop_at`` look), ``failed`` (with the reason:
the job's own exception, a crash, a timeout, out of memory) or ``stopped`` (abandoned because the owner was
asked to stop; the campaign resumes it later). Nothing here writes records: the campaign reads each job's
directory back, so a ``kill -9`` between submission and gathering loses and duplicates nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config.job import JobSpec
from evotrainer.core.errors import ConfigError
from evotrainer.jobs.pool import _UNSET, BranchPool, PoolStopped, job_timeout_from_env, run_branch


class JobRequest(BaseModel):
    """One job to run: its ``JobSpec`` plus how to start it (fresh, forked, resumed, up to a look)."""

    model_config = ConfigDict(extra="forbid")

    job: JobSpec = Field(..., description="The job, validated where the request is built (the campaign's process); "
                                         "a worker gets it as JSON (:meth:`wire`).")
    home: str = Field(..., description="The EvoTrainer home the job writes under.")
    fork: str | None = Field(None, description="RUN@STEP to fork from (a new job only).")
    resume: str | None = Field(None, description="Name of the job to resume.")
    stop_at: int | None = Field(None, ge=1, description="Pause at this global step (a backtest look).")

    @property
    def name(self) -> str:
        return self.job.name or ""

    def wire(self) -> dict[str, Any]:
        """The job as the JSON a worker process (or a Ray task) receives and validates again."""
        return self.job.model_dump(mode="json")


class JobOutcome(BaseModel):
    """What became of one request."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["finished", "failed", "stopped"]
    error: str | None = Field(None, description="Why it failed or stopped.")
    result: dict[str, Any] | None = Field(None, description="The runner's JobResult, as JSON, when finished.")
    out_of_memory: bool = False

    @classmethod
    def from_worker(cls, out: dict[str, Any]) -> JobOutcome:
        if out.get("ok"):
            return cls(status="finished", result=out.get("result"))
        return cls(status="failed", error=str(out.get("error") or "unknown error"),
                   out_of_memory=bool(out.get("out_of_memory")))


@runtime_checkable
class Launcher(Protocol):
    """Runs jobs somewhere and reports typed outcomes; the campaign's only way to run training or scoring."""

    on_spawn: Callable[[list[int]], None] | None

    def warm(self) -> None:
        """Get ready (start workers, connect) so that it overlaps the caller's own set-up."""

    def warming(self) -> bool:
        """Whether a job submitted now would wait for workers still importing the training stack (the caller may
        use that wait for its own imports)."""

    def shares(self, jobs: int) -> list[int | None]:
        """torch threads for each of ``jobs`` new jobs submitted as one batch, in order (None: the worker's own
        count). A job keeps its count for life (``JobSpec.threads``), so the caller sets it once, from the whole
        batch, before any job of it starts: a re-run after ``kill -9`` then gives a job the count it began with."""

    def run_many(self, requests: list[JobRequest]) -> list[JobOutcome]:
        """Submit every request at once and wait for all; outcomes in request order. Raises ``PoolStopped``
        when the owner asked to stop while they ran (the jobs are resumable)."""

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        """Greedy accuracies of saved policies on a held-out split (``evotrainer.jobs.scoring``); a local launcher
        splits the policies among its workers."""

    def release(self) -> None:
        """Let go of paused jobs kept alive between looks (a backtest whose looks are over; they stay paused on
        disk)."""

    def pids(self) -> list[int]:
        """Local processes this launcher started (recorded by the campaign's owner; Ray's are Ray's)."""

    def stop(self) -> None:
        """Abandon the jobs in flight and refuse new ones; safe in a signal handler."""

    def close(self) -> None:
        """Release workers and connections."""


class _Closing:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.kill()
        else:
            self.close()

    def kill(self) -> None:  # pragma: no cover - overridden
        self.close()


# ---------------------------------------------------------------------------------------------- local
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
        if outcome.result is not None and outcome.result.get("status") == "paused":
            self._holder[str(outcome.result.get("name"))] = slot
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
        agentic's (bench/RESULTS.md §7, session 41): 3-6 s less a campaign, less the wait for both cores. Such a job
        starts once the cores it needs are free (:meth:`_take`), never beside another job. It keeps its count at
        later looks, so a look in which another arm stopped but its own went on would have an odd number of
        one-core jobs, one of them alone. In the benches' homes of sessions 37-40, 4 looks of 61 had 6 branches
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

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        # a campaign scores with no job running: the policies are split among the workers, which share the cores
        from evotrainer.jobs.scoring import join_answers, split_request

        parts = split_request(request, self.workers)
        threads = self._cores_for(len(parts))

        def one(part: dict[str, Any]) -> dict[str, Any]:
            cores = threads or self.cores
            slot = self._take(cores=cores)
            try:
                return slot.score(part, threads=threads)
            finally:
                self._give(slot, cores)

        if len(parts) == 1:
            return one(parts[0][0])
        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="evotrainer-score") as ex:
            return join_answers(parts, list(ex.map(one, [p for p, _ in parts])))

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


# ---------------------------------------------------------------------------------------------- ray
_ENV_PREFIXES = ("EVOTRAINER_", "HF_", "TRANSFORMERS_", "MLFLOW_")
_ENV_NAMES = ("TOKENIZERS_PARALLELISM", "DO_NOT_TRACK")


def _timed(fn: Callable[..., dict[str, Any]], timeout_s: float | None, *args: Any) -> dict[str, Any]:
    """A Ray task's body: ``fn(*args)``, ended as failed once it has run ``timeout_s`` seconds *in its worker*
    (queueing and worker start-up do not count). The task is submitted with ``max_calls=1`` when a timeout is
    set, so its worker process exits after returning and takes a hung job's thread with it."""
    if timeout_s is None:
        return fn(*args)
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.setdefault("out", fn(*args)), name="evotrainer-job", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return {"ok": False, "error": f"timed out: the job ran longer than its {timeout_s:g} s per-job timeout and "
                                      "its Ray worker was ended"}
    return box.get("out") or {"ok": False, "error": "the job ended without a result"}


def _reload_auth() -> None:
    """Make this process's Ray client read the auth token from the environment again (Ray caches the first one it
    saw; a second local head in one process has a new token). Private Ray API, hence the guard."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):
        pass


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("launcher.kind: ray needs the 'ray' package: pip install 'evotrainer[ray]' (or pip install "
                          "ray), or use launcher.kind: local") from None
    return ray


class RayLauncher(_Closing):
    """Each job a Ray task with ``cpus``/``gpus`` of the cluster's resources; at most ``workers`` at once
    (None: as many as the cluster's resources allow).

    ``address``: ``ray://HOST:PORT`` (Ray Client), ``auto`` (the cluster this machine belongs to), or None to
    start a local head here (``num_cpus`` caps its CPUs; it ends with this process).
    """

    def __init__(self, address: str | None = None, cpus: float = 1.0, gpus: float = 0.0, workers: int | None = None,
                 timeout_s: float | None = _UNSET, num_cpus: int | None = None):
        self.address, self.cpus, self.gpus, self.workers = address, cpus, gpus, workers
        self.timeout_s = job_timeout_from_env() if timeout_s is _UNSET else timeout_s
        self.num_cpus = num_cpus
        self.on_spawn: Callable[[list[int]], None] | None = None
        self._ray: Any = None
        self._remote: Any = None
        self._pgid: int | None = None  # the local head's process group, when this launcher started one
        self._guard: Any = None
        self._stopping = False
        self._inflight: list[Any] = []
        self._lock = threading.Lock()

    def warm(self) -> None:
        self._connect()

    def warming(self) -> bool:
        return False  # Ray's workers import on their own schedule; nothing here says when

    def _connect(self):
        if self._ray is not None:
            return self._ray
        if self.address is None and self._pgid is None:
            address = self._start_head()  # before Ray is imported here: it reads its auth token once
        else:
            address = self.address
        ray = _import_ray()
        if not ray.is_initialized():
            if self._pgid is not None:
                _reload_auth()
            # what the jobs read from the environment (fault injection, offline hub, tracking URIs) goes with them
            env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES}
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False,
                         runtime_env={"env_vars": env})
            except (ConnectionError, RuntimeError) as err:
                self.close()
                raise ConfigError(f"launcher.address={self.address!r}: no Ray cluster answered ({err}); start one "
                                  "(ray start --head) or leave the address out to start a local head") from None
        self._ray = ray
        return ray

    def _start_head(self) -> str:
        """Start a local Ray head on 127.0.0.1 (free ports, ``num_cpus`` CPUs) in a process group of its own, with
        a guard process that kills that group as soon as this process dies, however it dies: ``ray.init()``'s own
        local cluster leaves its agents behind on ``kill -9`` of the driver."""
        import secrets
        import socket
        import subprocess
        import sys

        from evotrainer.core.procs import group_members, this_process

        socks = []
        for _ in range(8):
            sk = socket.socket()
            sk.bind(("127.0.0.1", 0))
            socks.append(sk)
        ports = [sk.getsockname()[1] for sk in socks]
        for sk in socks:
            sk.close()
        cmd = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head",
               "--node-ip-address=127.0.0.1", f"--port={ports[0]}", f"--ray-client-server-port={ports[1]}",
               f"--dashboard-port={ports[2]}", f"--dashboard-agent-listen-port={ports[3]}",
               f"--dashboard-agent-grpc-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
               f"--metrics-export-port={ports[6]}", f"--node-manager-port={ports[7]}",
               f"--num-cpus={self.num_cpus or os.cpu_count() or 1}", "--include-dashboard=false",
               "--disable-usage-stats"]
        # a fresh token: nobody else on this machine can submit code to this head, and this driver can
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        os.environ.update(auth)
        head = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
        self._pgid = head.pid
        me = this_process()
        self._guard = subprocess.Popen([sys.executable, "-m", "evotrainer.core.procs", "guard", str(me.pid), repr(me.started),
                                        str(self._pgid)], start_new_session=True, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            out, _ = head.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            self.close()
            raise ConfigError("launcher: the local Ray head did not start within 300 s") from None
        if head.returncode != 0:
            self.close()
            raise ConfigError(f"launcher: the local Ray head did not start (ray start exit {head.returncode}): "
                              f"{out.strip()[-800:]}")
        if self.on_spawn is not None:
            self.on_spawn([*group_members(self._pgid), self._guard.pid])
        return f"127.0.0.1:{ports[0]}"

    def pids(self) -> list[int]:
        """The local head's processes and its guard, when this launcher started them (a cluster's are its own:
        the tasks this driver owns end with it, by Ray's ownership model)."""
        from evotrainer.core.procs import group_members

        if self._pgid is None:
            return []
        return [*group_members(self._pgid), *([self._guard.pid] if self._guard is not None else [])]

    def _parallel(self) -> int:
        if self.workers:
            return self.workers
        res = self._ray.cluster_resources()
        fit = [res.get("CPU", 1.0) / self.cpus] if self.cpus else []
        if self.gpus:
            fit.append(res.get("GPU", 0.0) / self.gpus)
        return max(1, int(min(fit))) if fit else 1

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._remote is None:
            self._remote = self._ray.remote(max_calls=1 if self.timeout_s is not None else 0)(_timed)
        return self._remote.options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0).remote(fn, self.timeout_s, *args)

    def shares(self, jobs: int) -> list[int | None]:
        """None each: a Ray task computes with the CPUs its worker was given (``cpus_per_job``)."""
        return [None] * jobs

    def run_many(self, requests: list[JobRequest]) -> list[JobOutcome]:
        if self._stopping:
            raise PoolStopped("the launcher was asked to stop; the jobs were not started")
        ray = self._connect()
        parallel = self._parallel()
        outcomes: list[JobOutcome | None] = [None] * len(requests)
        pending: list[tuple[int, Any]] = []
        nxt = 0
        while nxt < len(requests) or pending:
            while nxt < len(requests) and len(pending) < parallel and not self._stopping:
                r = requests[nxt]
                ref = self._submit(run_branch, r.wire(), r.home, r.fork, r.resume, r.stop_at)
                with self._lock:
                    self._inflight.append(ref)
                pending.append((nxt, ref))
                nxt += 1
            if self._stopping:
                for _, ref in pending:
                    ray.cancel(ref, force=True)
                raise PoolStopped("the jobs in flight were cancelled: their owner was asked to stop")
            ready, _ = ray.wait([ref for _, ref in pending], num_returns=1, timeout=0.5)
            for i, ref in list(pending):
                if ref not in ready:
                    continue
                outcomes[i] = self._outcome(ray, ref)
                pending.remove((i, ref))
                with self._lock:
                    self._inflight.remove(ref)
        return [o for o in outcomes if o is not None]

    def _outcome(self, ray: Any, ref: Any) -> JobOutcome:
        try:
            return JobOutcome.from_worker(ray.get(ref))
        except Exception as err:  # noqa: BLE001 - a crashed or lost worker is a failed branch with Ray's reason
            if self._stopping:
                return JobOutcome(status="stopped", error=str(err)[:500])
            kind = type(err).__name__
            reason = str(err).strip().splitlines()[0][:500] if str(err).strip() else kind
            memory = "OutOfMemory" in kind or "memory" in reason.lower()
            return JobOutcome(status="failed", error=f"{'out of memory: ' if memory else ''}Ray {kind}: {reason}",
                              out_of_memory=memory)

    def release(self) -> None:
        """Nothing to let go of: a Ray task holds nothing between calls (each look resumes from its checkpoint)."""

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        # one task, not one per policy as a local launcher splits it: a task that finds no idle worker starts a new
        # one, whose torch/TRL imports (~7 s) cost more than a few evaluations side by side save
        from evotrainer.jobs.scoring import score_policies

        ray = self._connect()
        try:
            return ray.get(self._submit(score_policies, request))
        except Exception as err:  # noqa: BLE001 - reported like a worker's own error
            return {"ok": False, "error": f"Ray {type(err).__name__}: {str(err)[:500]}"}

    def stop(self) -> None:
        self._stopping = True  # run_many cancels what is in flight at its next poll (no Ray call in a signal handler)

    def kill(self) -> None:
        self._stopping = True
        if self._ray is not None:
            with self._lock:
                refs = list(self._inflight)
            for ref in refs:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self.close()

    def close(self) -> None:
        from evotrainer.core.procs import end_group

        if self._ray is not None:
            self._ray.shutdown()
        self._ray = self._remote = None
        if self._pgid is not None:
            end_group(self._pgid)
            self._pgid = None
        if self._guard is not None:
            self._guard.wait(timeout=10)  # it returns once the group is empty
            self._guard = None


def make_launcher(kind: str = "local", workers: int | None = 1, timeout_s: float | None = _UNSET,
                  address: str | None = None, cpus: float = 1.0, gpus: float = 0.0,
                  live: int = 0) -> LocalLauncher | RayLauncher:
    """The launcher a campaign spec's ``launcher`` section asks for."""
    if kind == "local":
        return LocalLauncher(workers=workers or 1, timeout_s=timeout_s, live=live)
    if kind == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:  # say what to install now, not at the first backtest
            _import_ray()
        return RayLauncher(address=address, cpus=cpus, gpus=gpus, workers=workers, timeout_s=timeout_s)
    raise ConfigError(f"launcher.kind={kind!r}: use 'local' or 'ray'")


__all__ = ["JobOutcome", "JobRequest", "Launcher", "LocalLauncher", "RayLauncher", "make_launcher"]
