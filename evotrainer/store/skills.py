"""The skill-library index: skills synced from the library's files, searched by BM25 (and SQLite FTS5). Part of ``Store`` (a mixin)."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from evotrainer.core.bm25 import BM25, tokenize
from evotrainer.store.base import NotFound, StoreBase, StoreError
from evotrainer.store.entities import IndexedSkill, SkillDoc, SkillMatch, SkillSync
from evotrainer.store.models import (
    SKILLS_FTS,
    SkillRow,
    utcnow,
)
from evotrainer.store.rows import (
    _keywords,
    _skill,
)


class SkillIndexMixin(StoreBase):
    # ------------------------------------------------------------------------------------------ skill index
    def sync_skills(self, library: str, docs: list[SkillDoc]) -> SkillSync:
        """Make the index of ``library`` (a folder path) match ``docs``, the files it holds now.

        A new slug is added, a slug whose ``content_hash`` differs is rewritten (a removed one that is back
        counts as changed), and a slug with no doc is marked ``removed`` — never deleted. Unchanged rows are
        not touched, so a re-sync of an unchanged library writes nothing. On SQLite the FTS5 index follows.
        """
        seen = [d.slug for d in docs]
        if len(set(seen)) != len(seen):
            raise StoreError(f"duplicate slugs in one sync of {library}: {sorted({x for x in seen if seen.count(x) > 1})}")
        report = SkillSync(library=library)
        with self._write() as s:
            rows = {r.slug: r for r in s.scalars(select(SkillRow).where(SkillRow.library == library))}
            now = utcnow()
            for d in docs:
                r = rows.get(d.slug)
                if r is not None and r.content_hash == d.content_hash and r.removed is None:
                    report.unchanged.append(d.slug)
                    continue
                if r is None:
                    r = SkillRow(library=library, **d.model_dump(), indexed=now, removed=None)
                    s.add(r)
                    report.added.append(d.slug)
                else:
                    for k, v in d.model_dump().items():
                        setattr(r, k, v)
                    r.indexed, r.removed = now, None
                    report.changed.append(d.slug)
                s.flush()
                self._fts_put(s, r)
            for slug, r in rows.items():
                if slug not in set(seen) and r.removed is None:
                    r.removed = now
                    report.removed.append(slug)
                    self._fts_drop(s, r.id)
        return report

    def list_skills(self, library: str | None = None, *, include_removed: bool = False) -> list[IndexedSkill]:
        """Indexed skills (of one library folder, or of all), by library then slug."""
        with self._read() as s:
            q = select(SkillRow)
            if library is not None:
                q = q.where(SkillRow.library == library)
            if not include_removed:
                q = q.where(SkillRow.removed.is_(None))
            return [_skill(r) for r in s.scalars(q.order_by(SkillRow.library, SkillRow.slug))]

    def get_skill(self, library: str, slug: str) -> IndexedSkill:
        """One indexed skill, removed or not; ``NotFound`` names some slugs of that library."""
        with self._read() as s:
            r = s.scalar(select(SkillRow).where(SkillRow.library == library, SkillRow.slug == slug))
            if r is None:
                names = s.scalars(select(SkillRow.slug).where(SkillRow.library == library)
                                  .order_by(SkillRow.slug).limit(6)).all()
                shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
                raise NotFound(f"skill '{slug}' not found in the index of {library}; "
                               + (f"indexed skills include: {shown}" if names else "nothing is indexed there yet"))
            return _skill(r)

    def search_skills(self, library: str, query: str, limit: int = 10) -> list[SkillMatch]:
        """Present skills of ``library`` ranked by text relevance to ``query`` (best first, score > 0).

        SQLite: FTS5 ``bm25()`` with column weights name 4, keywords 3, description 2, body 1 (any query word
        may match). Other databases: the same weights through the pure-Python BM25 of ``library.bm25``.
        """
        words = list(dict.fromkeys(tokenize(query)))
        if not words or limit < 1:
            return []
        with self._read() as s:
            if self._sqlite:
                match = " OR ".join(f'"{w}"' for w in words)
                rows = s.execute(text(
                    f"SELECT k.slug, bm25({SKILLS_FTS}, 4.0, 2.0, 1.0, 3.0) AS rank FROM {SKILLS_FTS} "
                    f"JOIN skills k ON k.id = {SKILLS_FTS}.rowid WHERE {SKILLS_FTS} MATCH :match "
                    "AND k.library = :library AND k.removed IS NULL ORDER BY rank, k.slug LIMIT :limit"),
                    {"match": match, "library": library, "limit": limit}).all()
                return [SkillMatch(slug=slug, score=-rank) for slug, rank in rows if -rank > 0]
            present = s.scalars(select(SkillRow).where(SkillRow.library == library, SkillRow.removed.is_(None))
                                .order_by(SkillRow.slug)).all()
            docs = [" ".join([r.name] * 4 + [_keywords(r)] * 3 + [r.description] * 2 + [r.body]) for r in present]
            scored = sorted(zip(BM25(docs).scores(query), (r.slug for r in present)), key=lambda t: (-t[0], t[1]))
            return [SkillMatch(slug=slug, score=sc) for sc, slug in scored[:limit] if sc > 0]

    def _fts_put(self, s: Session, r: SkillRow) -> None:
        if not self._sqlite:
            return
        self._fts_drop(s, r.id)
        s.execute(text(f"INSERT INTO {SKILLS_FTS}(rowid, name, description, body, keywords) "
                       "VALUES (:id, :name, :description, :body, :keywords)"),
                  {"id": r.id, "name": r.name, "description": r.description, "body": r.body, "keywords": _keywords(r)})

    def _fts_drop(self, s: Session, skill_id: int) -> None:
        if self._sqlite:
            s.execute(text(f"DELETE FROM {SKILLS_FTS} WHERE rowid = :id"), {"id": skill_id})
