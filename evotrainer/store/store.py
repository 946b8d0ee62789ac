"""``Store``: the one object that reads and writes campaign state. Everything else sees pydantic entities.

Three rules shape every method:

* **Idempotent writes.** A campaign node can be killed (``kill -9``) after a write and run again on resume,
  so every write with a natural key (an id, a (backtest, proposal, role, seed) slot, a ledger key) returns
  what is already stored instead of writing twice. The database enforces the keys (primary keys, UNIQUE);
  the methods only turn a clash into "return the stored one". First write wins: a re-run never replaces.
* **Short transactions.** Each method opens a session, does its work, converts rows to entities and
  commits; no session or row escapes. Writes on SQLite start with ``BEGIN IMMEDIATE`` so two processes (a
  campaign and ``review approve``) queue on the busy timeout instead of failing when a read transaction
  tries to become a write one.
* **Errors that say what exists.** Unknown ids raise ``NotFound`` naming the id and a few that do exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from evotrainer.core.errors import ConfigError
from evotrainer.core.redact import mask
from evotrainer.core.sqlite_wal import to_wal
from evotrainer.store.base import NotFound, StoreError
from evotrainer.store.campaigns import CampaignsMixin
from evotrainer.store.ownership import OwnershipMixin
from evotrainer.store.proposals import ProposalsMixin
from evotrainer.store.skills import SkillIndexMixin

STATE_URL_ENV = "EVOTRAINER_STATE_URL"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK_KEY = 0x65766F7472  # PostgreSQL advisory lock held while migrating ("evotr")


PG_EXAMPLE = "postgresql+psycopg://user:password@host:5432/evotrainer"
# What to install for a driver SQLAlchemy could not import (by module name).
DRIVER_INSTALL = {
    "psycopg": "pip install 'psycopg[binary]' (or pip install 'evotrainer[team]')",
    "psycopg2": "use the psycopg 3 driver instead: postgresql+psycopg://… with pip install 'psycopg[binary]' "
                "(or pip install 'evotrainer[team]'); or pip install psycopg2-binary",
}


def _create_engine(url: Any, kw: dict[str, Any]) -> Engine:
    """``create_engine``, with a missing driver or unknown dialect told as what to install or set."""
    shown = mask(url.render_as_string(hide_password=False))
    try:
        return create_engine(url, **kw)
    except NoSuchModuleError:
        raise ConfigError(f"state store URL {shown!r}: SQLAlchemy has no dialect '{url.drivername}'; "
                          f"use sqlite:///PATH or {PG_EXAMPLE} ({STATE_URL_ENV})") from None
    except ImportError as e:
        name = (e.name or "").split(".")[0]
        raise ConfigError(f"the state store {shown!r} needs the database driver '{name or e}', which is not "
                          f"installed: {DRIVER_INSTALL.get(name, f'pip install {name}')}") from None


def alembic_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` for the store's migrations, built in code (there is no alembic.ini).

    To write the next migration after changing ``models.py``::

        from alembic import command
        command.revision(alembic_config("sqlite:///scratch.db"), message="...", autogenerate=True)

    then read and edit the generated file (CHECK lists must be literal text, as in ``0001_initial.py``).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolation
    return cfg


class Store(CampaignsMixin, ProposalsMixin, SkillIndexMixin, OwnershipMixin):
    """Campaign state in one SQL database (SQLite file by default; any SQLAlchemy URL by configuration).

    Opening a store brings its schema to the newest migration (a no-op when it is already there), so a
    new release can open an old home. Safe to open from several processes at once.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0):
        self.url = url
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError):  # ValueError: a port that is not a number
            shown = mask(url)  # never print a password
            raise ConfigError(f"state store URL {shown!r} is not a database URL; set {STATE_URL_ENV} to e.g. "
                              f"{PG_EXAMPLE}, or unset it for sqlite:///HOME/state.db") from None
        self._sqlite = parsed.get_backend_name() == "sqlite"
        if self._sqlite and parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kw: dict[str, Any] = {"connect_args": {"timeout": busy_timeout_s}} if self._sqlite else {"pool_pre_ping": True}
        self._engine: Engine = _create_engine(parsed, kw)
        if self._sqlite:
            _sqlite_setup(self._engine, busy_timeout_s)
        # Writes go through this view of the engine: on SQLite its transactions start with BEGIN IMMEDIATE.
        self._writer: Engine = self._engine.execution_options(sqlite_begin="IMMEDIATE")
        self._migrate()

    @classmethod
    def for_home(cls, home: Path) -> Store:
        """``$EVOTRAINER_STATE_URL`` if set (e.g. ``postgresql+psycopg://…``), else ``sqlite:///HOME/state.db``."""
        url = os.environ.get(STATE_URL_ENV, "").strip()
        return cls(url or f"sqlite:///{Path(home).expanduser().resolve() / 'state.db'}")

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({mask(self.url)!r})"

    # ------------------------------------------------------------------------------------------ plumbing
    def _migrate(self) -> None:
        cfg = alembic_config()
        heads = set(ScriptDirectory.from_config(cfg).get_heads())
        try:
            conn = self._engine.connect()
        except OperationalError as e:
            if self._sqlite:
                raise
            raise ConfigError(f"cannot reach the state store {mask(self.url)} ({STATE_URL_ENV}): "
                              f"{mask(str(e.orig).strip().splitlines()[0])}") from None
        with conn:
            if set(MigrationContext.configure(conn).get_current_heads()) == heads:
                return
        # The write lock is taken before Alembic reads the version table, so of two processes opening a new
        # file at once, the second waits and then finds the schema at head. SQLite: BEGIN IMMEDIATE. PostgreSQL
        # does not serialise writers, and two concurrent CREATE TABLEs of one name fail (pg_type's unique index):
        # a transaction-level advisory lock, released at commit, queues them.
        with self._writer.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

def _sqlite_setup(engine: Engine, busy_timeout_s: float) -> None:
    """WAL (readers never block the writer), a busy timeout, foreign keys, and explicit BEGINs.

    pysqlite's own transaction handling starts a transaction lazily at the first write, so a session that
    read first would try to upgrade its lock mid-transaction and fail at once with "database is locked" if
    another process wrote meanwhile; emitting BEGIN ourselves (IMMEDIATE for writes) makes writers queue.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN in _on_begin
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        to_wal(cur, busy_timeout_s)
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('sqlite_begin', 'DEFERRED')}")


__all__ = ["Store", "StoreError", "NotFound", "alembic_config", "STATE_URL_ENV"]
