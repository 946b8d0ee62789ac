"""The launcher seam: what a campaign hands a launcher (typed ``JobRequest``s) and gets back (``JobOutcome``s,
in the same order), and the ``Launcher`` protocol every engine implements (one file each: ``local``, ``ray``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config.job import JobSpec
from evotrainer.jobs.result import JobResult
from evotrainer.jobs.scoring import ScoreAnswer, ScoreRequest


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
    result: JobResult | None = Field(None, description="The runner's result, when finished.")
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

    def score(self, request: ScoreRequest) -> ScoreAnswer:
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
