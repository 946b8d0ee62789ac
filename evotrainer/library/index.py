"""Keep the state store's index of a library in step with its files, and ask it (or BM25) for text relevance.

Why an index at all when the files are the truth: the campaign, ``skills search`` and ``skills history`` run in
different processes and want full-text search (SQLite FTS5) and a record of skills that existed — a file a
person deleted is still what an old proposal cited. ``sync`` is cheap (hash every file, rewrite only what
changed) and runs before every store-backed search, so the index is never staler than the files.

Without a store (a unit test, a quick ``Library.search``) relevance comes from the same BM25 over the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evotrainer.core.bm25 import BM25
from evotrainer.library.format import relative
from evotrainer.store.entities import SkillDoc, SkillSync

if TYPE_CHECKING:
    from evotrainer.library.loader import Library
    from evotrainer.store import Store


def library_key(library: Library) -> str:
    """How the index names a library: its folder's absolute path."""
    return str(library.path.resolve())


def documents(library: Library) -> list[SkillDoc]:
    """One index document per valid file of the library."""
    out = []
    for e in library.entries:
        s = e.skill
        out.append(SkillDoc(slug=s.slug, kind=s.kind, status=s.status, name=s.name, description=s.description,
                            version=s.version, path=relative(library.path, e.file), content_hash=e.sha256,
                            symptoms=s.symptoms, knob=s.intervention.knob, available=s.intervention.available,
                            body=s.body, front_matter=s.front_matter()))
    return out


def sync(store: Store, library: Library) -> SkillSync:
    """Re-sync the store's index of ``library``: added, changed and removed files (removed rows are marked).

    Only valid files are indexed; a file that became invalid counts as removed until it is fixed.
    """
    return store.sync_skills(library_key(library), documents(library))


def _text(skill) -> str:
    keywords = " ".join([*(x.replace("_", " ") for x in skill.symptoms),
                         skill.intervention.knob.replace(".", " ").replace("_", " ")])
    return " ".join([skill.name] * 4 + [keywords] * 3 + [skill.description] * 2 + [skill.body])


def text_scores(library: Library, query: str, *, store: Store | None = None) -> dict[str, float]:
    """Relevance of every entry to ``query``, scaled so the best is 1.0 (entries with none are left out).

    With a store: FTS5 (or the store's BM25 on other databases) after a re-sync. Without: BM25 over the files,
    with the same field weights (name 4, keywords 3, description 2, body 1).
    """
    if store is not None:
        sync(store, library)
        raw = {m.slug: m.score for m in store.search_skills(library_key(library), query, limit=max(len(library), 1))}
    else:
        skills = library.skills
        raw = {s.slug: sc for s, sc in zip(skills, BM25([_text(s) for s in skills]).scores(query)) if sc > 0}
    top = max(raw.values(), default=0.0)
    return {slug: round(sc / top, 6) for slug, sc in raw.items()} if top > 0 else {}
