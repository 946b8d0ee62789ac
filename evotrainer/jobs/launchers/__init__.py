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

import importlib.util

from evotrainer.core.errors import ConfigError
from evotrainer.jobs.launchers.base import JobOutcome, JobRequest, Launcher
from evotrainer.jobs.launchers.local import LocalLauncher
from evotrainer.jobs.launchers.ray import RayLauncher, _import_ray
from evotrainer.jobs.pool import _UNSET


def make_launcher(kind: str = "local", workers: int | None = 1, timeout_s: float | None = _UNSET,
                  address: str | None = None, cpus: float = 1.0, gpus: float = 0.0,
                  live: int = 0) -> LocalLauncher | RayLauncher:
    """The launcher a campaign spec's ``launcher`` section asks for."""
    if kind == "local":
        return LocalLauncher(workers=workers or 1, timeout_s=timeout_s, live=live)
    if kind == "ray":
        if importlib.util.find_spec("ray") is None:  # say what to install now, not at the first backtest
            _import_ray()
        return RayLauncher(address=address, cpus=cpus, gpus=gpus, workers=workers, timeout_s=timeout_s)
    raise ConfigError(f"launcher.kind={kind!r}: use 'local' or 'ray'")


__all__ = ["JobOutcome", "JobRequest", "Launcher", "LocalLauncher", "RayLauncher", "make_launcher"]
