"""Jobs as Ray tasks (``run_branch`` is the task body), on an existing cluster or a local head started here;
tasks belong to the driver that submitted them, so they end when the campaign process does (Ray's ownership
model), and a local head goes with it (Ray's reaper).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from evotrainer.core.errors import ConfigError
from evotrainer.core.procs import end_group, group_members, this_process
from evotrainer.jobs.launchers.base import JobOutcome, JobRequest, _Closing
from evotrainer.jobs.pool import _UNSET, PoolStopped, job_timeout_from_env, run_branch
from evotrainer.jobs.scoring import ScoreAnswer, ScoreRequest, score_policies

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

    def score(self, request: ScoreRequest) -> ScoreAnswer:
        # one task, not one per policy as a local launcher splits it: a task that finds no idle worker starts a new
        # one, whose torch/TRL imports (~7 s) cost more than a few evaluations side by side save

        ray = self._connect()
        try:
            return ScoreAnswer.model_validate(ray.get(self._submit(score_policies, request.model_dump(mode="json"))))
        except Exception as err:  # noqa: BLE001 - reported like a worker's own error
            return ScoreAnswer(ok=False, error=f"Ray {type(err).__name__}: {str(err)[:500]}")

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

        if self._ray is not None:
            self._ray.shutdown()
        self._ray = self._remote = None
        if self._pgid is not None:
            end_group(self._pgid)
            self._pgid = None
        if self._guard is not None:
            self._guard.wait(timeout=10)  # it returns once the group is empty
            self._guard = None
