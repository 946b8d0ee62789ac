"""Backtest branches kept alive in their worker between looks.

Why: a backtest trains every arm × seed one look at a time, and each look used to be a session of its own: the
worker built a Trainer, loaded the policy, optimizer and random state from the look's checkpoint, trained ten
steps, and tore it all down again. On the demo's tiny policy that is ~0.3 s a look beside ~4 s of steps, over
36 looks a campaign (bench/log/06-the-demo-campaign.md); for a real model on a GPU the weights and optimizer state travel each
time. Here a branch's Trainer stays alive in its worker, paused inside its training loop, and the next look goes
on from there.

What does not change: each look still ends as a clean pause on disk — checkpoint, evaluation, rollouts and
MLflow flushed, ``meta.json`` ``paused`` — and the run's lock is let go while the session waits. So ``kill -9`` of
the worker or of the campaign, a resume by another process, or a campaign restarted elsewhere all go on from the
checkpoint as before. A session goes on only when it can take the lock back and the run on disk is still the
pause it wrote; else it ends, and the look resumes from the checkpoint (``runner.run_job``'s ``hold``). Before it
goes on it restores the random state its checkpoint saved, since other branches trained in this process
meanwhile. A continued look is therefore the run a resume would have trained, which is the run of a job that
never paused (tests/test_live.py).

Bounds: at most ``cap`` live sessions a worker (``launcher.live_sessions``; with several workers, each has its own);
a look past the cap pauses the old way, by ending its session. A session whose run another worker went on with
(its look found this worker busy) is ended at this worker's next look. ``release()`` ends them all; a backtest calls
it when its looks are over, since its branches are then forked from, never resumed.

Each session trains in a thread of its own (a daemon: a worker exiting does not wait for it); only one of them
trains at a time, the one whose look the worker was asked for, while the others wait at their pause.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

from evotrainer.config.job import JobSpec
from evotrainer.jobs.result import JobResult, SessionAbandoned
from evotrainer.jobs.runner import run_job

_END = object()


class _Session:
    """One job trained in its own thread, handing each pause's result to the worker and waiting for the next look."""

    def __init__(self, name: str):
        self.name = name
        self.step = self.target = 0
        self.run_dir: Path | None = None
        self._next: queue.Queue[Any] = queue.Queue()  # the worker's orders: the next stop_at, or _END
        self._out: queue.Queue[tuple[str, Any]] = queue.Queue()  # the session's answers
        self._thread: threading.Thread | None = None

    def start(self, spec: JobSpec, home: Path, fork: str | None, resume: str | None, stop_at: int | None) -> None:
        def body() -> None:
            try:
                self._out.put(("done", run_job(spec, home, resume=resume, fork=fork, stop_at=stop_at, hold=self._hold)))
            except SessionAbandoned:
                self._out.put(("ended", None))
            except BaseException as err:  # noqa: BLE001 - handed to the worker's thread, which reports it
                self._out.put(("error", err))

        self._thread = threading.Thread(target=body, name=f"evotrainer-live-{self.name}", daemon=True)
        self._thread.start()

    def _hold(self, result: JobResult, target: int) -> int | None:
        self.name, self.step, self.target = result.name, result.steps_done, target
        self.run_dir = Path(result.run_dir)
        self._out.put(("paused", result))
        order = self._next.get()
        if order is _END:
            raise SessionAbandoned(f"run {self.name}: its live session was released")
        return order

    def go(self, stop_at: int | None) -> tuple[str, Any]:
        self._next.put(stop_at)
        return self.answer()

    def answer(self) -> tuple[str, Any]:
        got = self._out.get()
        if got[0] != "paused" and self._thread is not None:
            self._thread.join()
        return got

    def end(self) -> None:
        self._next.put(_END)
        self.answer()

    def stale(self) -> bool:
        """Whether its run on disk is no longer the pause it wrote (another worker or process resumed it)."""
        import json

        try:
            meta = json.loads((self.run_dir / "meta.json").read_text()) if self.run_dir is not None else {}
        except (OSError, ValueError):
            return True
        return meta.get("status") != "paused" or meta.get("paused_at") != self.step


_SESSIONS: dict[str, _Session] = {}
_LOCK = threading.Lock()  # one look at a time per worker (the pool's calls are sequential; this makes sure)


def run(spec: JobSpec, home: Path, fork: str | None, resume: str | None, stop_at: int | None, cap: int) -> JobResult:
    """``run_job`` for a worker that keeps up to ``cap`` paused sessions alive: a resume of one goes on in it."""
    with _LOCK:
        live = _SESSIONS.pop(resume, None) if resume else None
        if live is not None:
            if stop_at is None or live.step < stop_at <= live.target:
                got = live.go(stop_at)
                if got[0] != "ended":  # ended: the run changed on disk meanwhile; resumed from its checkpoint below
                    return _settle(live, got)
            else:
                live.end()  # not a look it can train to: the runner says why, below
            _collect()
        # sessions whose runs another worker went on with (a look that found this worker busy) hold memory for nothing
        if stale := [name for name, s in _SESSIONS.items() if s.stale()]:
            for name in stale:
                _SESSIONS.pop(name).end()
            _collect()
        if stop_at is None or len(_SESSIONS) >= cap:
            return run_job(spec, home, resume=resume, fork=fork, stop_at=stop_at)
        session = _Session(resume or spec.name or "")
        session.start(spec, home, fork, resume, stop_at)
        return _settle(session, session.answer())


def _settle(session: _Session, got: tuple[str, Any]) -> JobResult:
    kind, value = got
    if kind == "paused":
        if (old := _SESSIONS.get(session.name)) is not None and old is not session:
            old.end()  # the same run reached under another reference (its id, a path): one session per run
        _SESSIONS[session.name] = session
        return value
    if kind == "error":
        raise value
    if kind == "ended":  # a session that had not paused yet never ends this way
        raise RuntimeError(f"run {session.name}: its session ended before its first pause")
    return value


def release() -> int:
    """End every live session (their runs stay paused on disk); returns how many there were."""
    with _LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
        for s in sessions:
            s.end()
        if sessions:
            _collect()
        return len(sessions)


def _collect() -> None:
    """On a GPU, free the device memory ended sessions held, now: a Trainer is full of reference cycles, and the next
    session's ``gc.freeze()`` would pin them for its whole length. On a CPU the normal collections get them later; a
    full collection there costs ~0.3 s of a worker that has unfrozen its imports, at every release."""
    import torch

    if torch.cuda.is_available():
        import gc

        gc.collect()
        torch.cuda.empty_cache()


def live_names() -> list[str]:
    """The runs this process holds live sessions of."""
    return sorted(_SESSIONS)
