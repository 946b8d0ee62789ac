"""Switching a SQLite file to WAL when other processes may be opening it too.

Why a module: the state store and the LangGraph checkpointer both keep their file in WAL mode (readers never
block the writer), and both are opened by several processes at once (a campaign, ``review approve``, ``campaign
status``, a second ``resume`` that is refused).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def to_wal(cur: Any, busy_timeout_s: float) -> None:
    """Put the file in WAL mode, waiting (up to the busy timeout) for a concurrent opener.

    WAL is a property of the file, so it is read first and an opened store takes no lock for it. Converting needs
    exclusive access, and SQLite does not run the busy handler for ``PRAGMA journal_mode = WAL``: of two processes
    opening a new file at once, one failed at once with "database is locked" (CI, test_store; the same found in
    russellromney/honker#102). So the conversion is retried with a backoff, and a refusal that returns the old mode
    counts as busy too.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() in ("wal", "memory"):
            return  # WAL already, or an in-memory database, which has no WAL
        locked = None
        try:
            if str(cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower() == "wal":
                return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) and "busy" not in str(err):
                raise
            locked = err
        if time.monotonic() >= deadline:
            if locked is not None:
                raise sqlite3.OperationalError(f"database is locked: no switch to WAL within {busy_timeout_s:g} s") \
                    from locked
            return  # refused without an error to the end (a file system without WAL): the rollback journal stays
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
