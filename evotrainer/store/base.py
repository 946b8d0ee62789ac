"""What every part of ``Store`` stands on: its errors, short sessions, idempotent keyed writes, and not-found
messages that name what exists. The store's areas (campaigns, proposals, the skill index, ownership) are mixins
over this base, each in its own module, so that no one file holds the whole schema's methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, get_args

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evotrainer.core.errors import EvoError
from evotrainer.core.names import check_name
from evotrainer.store.models import (
    CampaignRow,
)

_UNSET: Any = object()
T = TypeVar("T")


class StoreError(EvoError):
    """A write the store refuses (a conflicting review, a status outside the vocabulary)."""


class NotFound(StoreError):
    """An id that is not in the store; the message names it and some that are."""

    exit_code = 2


def _check(value: str, allowed: Any, what: str) -> str:
    choices = get_args(allowed)
    if value not in choices:
        raise StoreError(f"invalid {what} '{value}'; allowed: {', '.join(choices)}")
    return value



class StoreBase:
    """Sessions and keyed writes over ``self._engine`` / ``self._writer`` (set by ``Store.__init__``)."""

    _engine: Engine
    _writer: Engine
    _sqlite: bool

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine) as s, s.begin():
            yield s

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer) as s, s.begin():
            yield s

    def _once(self, find: Callable[[Session], Any], make: Callable[[Session], Any], convert: Callable[[Any], T]) -> T:
        """Return ``convert(find())`` if the keyed row exists, else insert ``make()`` and return it converted.

        ``make`` may raise (NotFound for a missing parent). A UNIQUE clash with a concurrent writer (possible on
        PostgreSQL, where writes are not serialised) is answered by reading the winner's row.
        """
        try:
            with self._write() as s:
                row = find(s)
                if row is None:
                    row = make(s)
                    s.add(row)
                    s.flush()
                return convert(row)
        except IntegrityError:
            with self._read() as s:
                row = find(s)
                if row is None:
                    raise
                return convert(row)

    @staticmethod
    def _missing(s: Session, column: Any, key: str, what: str) -> NotFound:
        names = s.scalars(select(column).order_by(column.desc()).limit(6)).all()
        if not names:
            return NotFound(f"{what} '{key}' not found; the store has no {what}s yet")
        shown = ", ".join(str(n) for n in names[:5]) + (", …" if len(names) > 5 else "")
        return NotFound(f"{what} '{key}' not found; existing {what}s include: {shown}")

    def _get(self, s: Session, model: type, key: str, what: str) -> Any:
        row = s.get(model, key)
        if row is None:
            pk = model.__mapper__.primary_key[0]
            raise self._missing(s, pk, key, what)
        return row

    def _campaign_row(self, s: Session, campaign_id: str) -> CampaignRow:
        check_name(campaign_id, "campaign id")  # the one name rule: an id is also HOME/campaigns/<id>
        return self._get(s, CampaignRow, campaign_id, "campaign")
