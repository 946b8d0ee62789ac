"""The skill library: lessons that survive backtests and shape later search (issue 5).

- ``format``: the ``skills/<slug>/SKILL.md`` file (front matter + markdown body), parse and canonical write.
- ``lint``: every problem of every file, with path and field.
- ``loader``: ``Library.load(path)`` — the valid entries by slug, with their files and content hashes.
- ``index``: the state store's index of a library (re-synced from the files; FTS5 on SQLite, BM25 otherwise).
- ``retrieve``: ``retrieve(library, findings, domain, k)`` → ranked ``Hit``s with their score parts; ``search``.
- ``curation``: validated delta ops (add, update_evidence, merge, deprecate), the curation log, and
  ``record_outcome`` for the campaign's distill step.
- ``candidates``: skills as brain candidates resolved against a harness.

Names are imported lazily (``from evotrainer.library import Library`` works) so that importing the package
costs nothing until a name is used. The library sits above the store (its index lives there); the store needs
nothing from it (the skill vocabularies are in ``evotrainer.core.domain``, BM25 in ``evotrainer.core.bm25``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Skill": "format", "Evidence": "format", "Trigger": "format", "Intervention": "format", "Counters": "format",
    "Source": "format", "parse_skill": "format", "dump_skill": "format",
    "Problem": "lint", "lint_library": "loader",
    "Library": "loader", "resolve_library": "loader", "write_skill": "loader",
    "sync": "index",
    "Hit": "retrieve", "search": "retrieve", "domain_of": "retrieve",  # not `retrieve`: the submodule shadows it
    "AddOp": "curation", "UpdateEvidenceOp": "curation", "MergeOp": "curation", "DeprecateOp": "curation",
    "CurationError": "curation", "apply": "curation", "record_outcome": "curation", "known_mistake": "curation",
    "read_log": "curation",
    "to_candidates": "candidates",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evotrainer.library' has no attribute '{name}'")
    return getattr(importlib.import_module(f"evotrainer.library.{module}"), name)


__all__ = sorted(_EXPORTS)
