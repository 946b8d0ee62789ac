"""Alembic environment for the campaign store, configured in code (there is no alembic.ini).

``Store`` builds the ``Config`` (see ``evotrainer.store.store.alembic_config``) and passes its own open
connection in ``config.attributes["connection"]``, so the upgrade runs inside the store's transaction and
with its SQLite settings. Given only ``sqlalchemy.url`` (a developer writing the next migration with
``alembic.command.revision(..., autogenerate=True)``), it opens its own engine.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from evotrainer.store.models import Base, include_name

config = context.config
target_metadata = Base.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTERs go through table copies
        compare_type=True,
        include_name=include_name,  # the FTS5 virtual table of migration 0002 has no model
    )


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True, include_name=include_name)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.begin() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
