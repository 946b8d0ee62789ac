"""Campaign state: campaigns, policy and harness versions, findings, proposals, reviews, backtests, decisions,
the step ledger, the event log, the skill-library index and campaign ownership (leases, recorded processes), in
one SQL database behind one facade, ``Store``.

Why a facade: a campaign, the ``review`` CLI and the UI all read and write the same state, possibly from
different processes at once. Giving them one object whose methods take and return the pydantic entities
of ``evotrainer.core.domain`` (never ORM rows, never sessions) keeps transactions short and in one
place, makes every keyed write idempotent (a node re-run after ``kill -9`` duplicates nothing), and lets
the tables change behind migrations without touching callers. ``store.models`` is imported inside this package
alone: ``store.store`` (the engine, migrations and the class), ``store.base`` (sessions, keyed writes, errors),
``store.rows`` (rows to entities) and one mixin per area: ``campaigns`` (versions, findings, ledger, events),
``proposals`` (reviews, backtests, branches, decisions), ``skills`` (the library index) and ``ownership``
(leases: who owns a campaign now, and the processes it started).

Where the data lives: ``Store.for_home(home)`` opens ``sqlite:///HOME/state.db`` (WAL, busy timeout,
foreign keys on). To share state between machines, point it at PostgreSQL (or any SQLAlchemy URL) with::

    export EVOTRAINER_STATE_URL=postgresql+psycopg://user:password@host:5432/evotrainer

(install the driver: ``pip install 'evotrainer[team]'``, or ``pip install 'psycopg[binary]'``; a missing
driver, a bad URL or a server that does not answer is a ``ConfigError`` saying so). Opening a store runs the
Alembic migrations in ``store/migrations`` up to head, on SQLite and PostgreSQL alike; there is no alembic.ini,
the config is built in code (``alembic_config``); on PostgreSQL under an advisory lock, so processes that open
a new database together migrate it once.
"""

from evotrainer.store.entities import (
    Backtest,
    Event,
    IndexedSkill,
    Lease,
    RecordedProcess,
    SkillDoc,
    SkillMatch,
    SkillSync,
)
from evotrainer.store.store import STATE_URL_ENV, NotFound, Store, StoreError, alembic_config

__all__ = ["Store", "StoreError", "NotFound", "Backtest", "Event", "IndexedSkill", "SkillDoc", "SkillMatch", "SkillSync",
           "Lease", "RecordedProcess", "alembic_config", "STATE_URL_ENV"]
