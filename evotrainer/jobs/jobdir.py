"""A job directory is complete or absent, and has one writer at a time.

**Creation.** A new job is assembled under a temporary name in the jobs folder (``.creating-<name>-…``):
its harness, a fork's copied checkpoint, and ``meta.json`` last; then the folder is renamed to its name in
one step. Whoever looks for ``HOME/jobs/<name>`` (a resumed campaign, ``--resume``, the dashboard) finds
either nothing or a directory with its ``meta.json``; a creation killed half-way leaves only a hidden
``.creating-…`` folder, removed by the next creation once its lock shows that nobody writes it.

**One writer.** The process that trains a job holds an exclusive advisory lock (``flock``) on the job's
``.lock`` file from creation (or reopening) until it returns. A second writer — a campaign resumed while a
worker of the old one still trains, two ``train --resume`` of one run — is refused with ``JobBusy`` naming
the holder, instead of training the same steps twice into the same files. The kernel drops the lock when
its holder dies, however it dies, so a killed job can be resumed at once.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from evotrainer.core.errors import JobBusy

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks; creation is still atomic
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"
CREATING = ".creating-"


class JobLock:
    """The exclusive lock on one job directory (released by ``release``, or by the kernel when the process dies)."""

    def __init__(self, fh):
        self._fh = fh

    @classmethod
    def take(cls, run_dir: Path, name: str) -> JobLock:
        """Lock ``run_dir`` for this process or raise ``JobBusy`` naming the process that holds it."""
        fh = open(run_dir / LOCK_FILE, "a+")
        if fcntl is not None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                fh.close()
                raise JobBusy(f"run {name} is being written by {holder}; a job directory has one writer at a time: "
                              "wait for it to finish, or end that process and resume the run") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {os.uname().nodename if hasattr(os, 'uname') else '?'}\n")
        fh.flush()
        return cls(fh)

    def release(self) -> None:
        if self._fh is not None and not self._fh.closed:
            if fcntl is not None:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()


def is_locked(run_dir: Path) -> bool:
    """Does a live process hold ``run_dir``'s lock now? (False where there is no lock file or no flock.)"""
    if fcntl is None or not (run_dir / LOCK_FILE).is_file():
        return False
    with open(run_dir / LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


def staging_dir(jobs: Path, name: str) -> tuple[Path, JobLock]:
    """A new, locked, hidden folder to assemble job ``name`` in (debris of dead creations is swept first)."""
    jobs.mkdir(parents=True, exist_ok=True)
    for d in jobs.glob(CREATING + "*"):
        if d.is_dir() and not is_locked(d):
            shutil.rmtree(d, ignore_errors=True)  # its creator died before renaming it into place
    tmp = jobs / f"{CREATING}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp, JobLock.take(tmp, name)


def publish(tmp: Path, final: Path) -> None:
    """Rename the assembled ``tmp`` to ``final`` in one step; ``FileExistsError`` if ``final`` appeared meanwhile."""
    if final.exists():
        raise FileExistsError(final)
    try:
        os.rename(tmp, final)
    except OSError as err:  # ENOTEMPTY / EEXIST: another creator won the name
        raise FileExistsError(final) from err


__all__ = ["JobLock", "staging_dir", "publish", "is_locked", "LOCK_FILE", "CREATING"]
