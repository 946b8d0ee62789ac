"""Process identity and parent death: a pid is only ever acted on together with its start time.

A campaign records the processes it runs — its owner in the lease, its pool workers — as (host, pid, start
time). Before anything acts on a recorded process (ending a worker left behind by a dead owner, deciding
that a lease's owner is gone), the pid is looked up *and* its start time compared: a process with the same
pid and another start time is a stranger the kernel gave the number to, and is left alone. A zombie (dead,
not yet reaped by its new parent) counts as gone.

``die_with_parent`` is what a child calls first so that it cannot outlive the process that started it: on
Linux the kernel's parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and on every platform a
watchdog thread that polls the parent pid. This module imports nothing of EvoTrainer's own, so every layer
may use it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

import psutil

# Two reads of one process's start time agree exactly (boot time + clock ticks); this only absorbs float
# round trips through a database. Any other process with the same pid started at least one tick later.
START_TOLERANCE_S = 0.005
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_S = 0.5  # how often the fallback watchdog looks at the parent pid


@dataclass(frozen=True)
class ProcessRef:
    """One process, told apart from any later process that gets the same pid."""

    host: str
    pid: int
    started: float  # start time, seconds since the epoch (psutil ``create_time``)


def hostname() -> str:
    return socket.gethostname()


def start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), or None if there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def this_process() -> ProcessRef:
    return ProcessRef(hostname(), os.getpid(), psutil.Process().create_time())


def ref(pid: int) -> ProcessRef | None:
    """A ProcessRef for a live local pid (None if it is already gone)."""
    started = start_time(pid)
    return None if started is None else ProcessRef(hostname(), pid, started)


def _process(pid: int, started: float) -> psutil.Process | None:
    """The live process ``pid`` if it is the one that started at ``started``; None if gone, a zombie or reused."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - started) > START_TOLERANCE_S:
            return None  # the pid was reused: not ours
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # another user's process with our pid and start time: it is alive
        return psutil.Process(pid)


def alive(pid: int, started: float) -> bool:
    """Is the process that started at ``started`` with this pid still running (on this host)?"""
    return _process(pid, started) is not None


def signal_process(pid: int, started: float, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to that exact process; False if it is gone or the pid now belongs to another process."""
    p = _process(pid, started)
    if p is None:
        return False
    try:
        p.send_signal(sig)  # psutil re-checks pid + start time right before sending
        return True
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def end(pid: int, started: float, wait_s: float = 5.0) -> bool:
    """SIGKILL that exact process and wait (up to ``wait_s``) until it is gone; True if it was running."""
    if not signal_process(pid, started, signal.SIGKILL):
        return False
    deadline = time.monotonic() + wait_s
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def die_with_parent(parent_pid: int | None = None) -> None:
    """Make the calling process end (SIGKILL) as soon as its parent does, however the parent dies.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; the kernel delivers it when the *thread* that started this
    process ends, so the parent must start its children from a thread that lives as long as they should.
    Everywhere, and as a fallback: a daemon thread that polls the parent pid and ends this process when it
    changes (re-parented to init or a subreaper). If the parent already died before this call, exits now.
    """
    parent = os.getppid() if parent_pid is None else parent_pid
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl here: the watchdog below does the job
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="evotrainer-parent-watchdog", daemon=True).start()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.info["pid"]) == pgid:
                out.append(p.info["pid"])
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def end_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM process group ``pgid``, then SIGKILL what is left after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_members(pgid):
            return


def guard_group(owner_pid: int, owner_started: float, pgid: int) -> None:
    """Run as a separate process (``python -m evotrainer.core.procs guard OWNER_PID OWNER_START PGID``): SIGKILL
    process group ``pgid`` as soon as its owner is gone, however it died; return when the group is empty.

    For services that start their own process trees (a local Ray head: GCS, raylet and their agents), which
    a parent-death signal in one child cannot take down. It runs in a session of its own, so that killing the
    owner's process group does not kill the guard before it has done its job.
    """
    while group_members(pgid):
        if not alive(owner_pid, owner_started):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(WATCHDOG_S)


__all__ = ["ProcessRef", "hostname", "start_time", "this_process", "ref", "alive", "signal_process", "end",
           "die_with_parent", "START_TOLERANCE_S", "group_members", "end_group", "guard_group"]


if __name__ == "__main__":  # python -m evotrainer.core.procs guard OWNER_PID OWNER_START PGID
    if len(sys.argv) == 5 and sys.argv[1] == "guard":
        guard_group(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit("usage: python -m evotrainer.core.procs guard OWNER_PID OWNER_START PGID")
