"""Where a campaign's LangGraph checkpoints live: ``HOME/checkpoints.db`` (SQLite) by default, or a PostgreSQL
database named by ``EVOTRAINER_CHECKPOINT_URL`` so that a team's campaigns resume wherever their state is read.

The PostgreSQL saver needs ``langgraph-checkpoint-postgres`` and ``psycopg`` (``pip install 'evotrainer[team]'``).
Any other URL there is refused rather than ignored: a team whose state is shared but whose checkpoints stay on
one machine could not resume a campaign elsewhere. Missing packages, bad URLs and unreachable servers are
``ConfigError``s saying what to install or set.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from evotrainer.core.errors import ConfigError
from evotrainer.core.redact import mask
from evotrainer.core.sqlite_wal import to_wal

CHECKPOINT_URL_ENV = "EVOTRAINER_CHECKPOINT_URL"
SETUP_LOCK_KEY = 0x65766F7463  # PostgreSQL advisory lock held while the saver creates its tables ("evotc")
SETUP_WAIT_S = 300.0  # how long a process waits for another one creating those tables
SQLITE_BUSY_S = 30.0  # how long a checkpoint read or write waits for another process's (the state store's too)
TEAM_INSTALL = "pip install 'evotrainer[team]' (or: pip install langgraph-checkpoint-postgres 'psycopg[binary]')"


def checkpointer(home: Path):
    """The saver for ``$EVOTRAINER_CHECKPOINT_URL`` when set (PostgreSQL), else SQLite at ``HOME/checkpoints.db``."""
    url = os.environ.get(CHECKPOINT_URL_ENV, "").strip()
    if url:
        return postgres_saver(url)
    from langgraph.checkpoint.sqlite import SqliteSaver


    conn = sqlite3.connect(str(home / "checkpoints.db"), check_same_thread=False, timeout=SQLITE_BUSY_S)
    to_wal(conn.cursor(), SQLITE_BUSY_S)  # a plain PRAGMA failed at once while another opener held the file
    return SqliteSaver(conn)


def postgres_saver(url: str):
    """LangGraph's ``PostgresSaver`` on ``url`` with its tables created (once, however many processes start at once).

    ``postgresql://``, ``postgres://`` and SQLAlchemy's ``postgresql+psycopg://`` (the state store's form) are
    accepted. The connection stays open for the life of the process.
    """
    scheme, sep, rest = url.partition("://")
    shown = mask(url)
    if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise ConfigError(f"{CHECKPOINT_URL_ENV}={shown!r}: only a PostgreSQL URL is supported "
                          "(postgresql://user:password@host:5432/dbname); unset it to keep checkpoints in HOME/checkpoints.db")
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as e:
        raise ConfigError(f"{CHECKPOINT_URL_ENV} is set but {e.name or 'a driver'} is not installed: {TEAM_INSTALL}") from None
    try:
        # the connection PostgresSaver.from_conn_string makes, without its context manager: that one closes the
        # connection as soon as the manager is garbage-collected, and the saver must outlive this function
        conn = psycopg.Connection.connect(f"postgresql://{rest}", autocommit=True, prepare_threshold=0,
                                          row_factory=dict_row)
    except psycopg.OperationalError as e:
        raise ConfigError(f"cannot reach the checkpoint database {shown} ({CHECKPOINT_URL_ENV}): "
                          f"{str(e).strip().splitlines()[0]}") from None
    saver = PostgresSaver(conn)
    # setup() creates tables and inserts migration rows without a lock: two processes starting together on a new
    # database would both try, and one fail on a unique index. A session advisory lock queues them. It is polled
    # with short try-transactions, not waited for: setup() runs CREATE INDEX CONCURRENTLY, which waits for every
    # open transaction, a blocked pg_advisory_lock() included (a deadlock).
    deadline = time.monotonic() + SETUP_WAIT_S
    while not saver.conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (SETUP_LOCK_KEY,)).fetchone()["got"]:
        if time.monotonic() > deadline:
            raise ConfigError(f"another process has been creating the checkpoint tables in {shown} for "
                              f"{SETUP_WAIT_S:.0f} s; try again once it is done")
        time.sleep(0.1)
    try:
        saver.setup()
    finally:
        saver.conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))
    return saver
