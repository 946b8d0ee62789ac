"""``Library``: a folder of ``<slug>/SKILL.md`` files loaded and validated as one object.

Why one object: retrieval, curation, the CLI and the campaign all need the same view — the valid entries by
slug, each with its file and content hash (what the store index compares to notice an edit), and the
problems of the files that are not valid. A strict load (the default) refuses a library with any problem
and says which file and field; ``strict=False`` keeps going with the valid entries, which is what a running
campaign wants when a person has half-edited one file.

Where a library is: ``--library PATH``, else ``$EVOTRAINER_LIBRARY``, else ``./skills``
(:func:`resolve_library`). A campaign can start from any library, e.g. one an earlier campaign produced.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from evotrainer.core import atomic
from evotrainer.core.errors import ConfigError
from evotrainer.core.names import check_name
from evotrainer.library.format import SKILL_FILE, Skill, dump_skill, relative
from evotrainer.library.lint import Problem, check_file, check_text

LIBRARY_ENV = "EVOTRAINER_LIBRARY"
CURATION_LOG = "CURATION.jsonl"


def resolve_library(path: str | Path | None = None) -> Path:
    """An explicit path, else ``$EVOTRAINER_LIBRARY``, else ``skills/`` under the current directory."""
    raw = path if path is not None else os.environ.get(LIBRARY_ENV) or "skills"
    return Path(raw).expanduser().resolve()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A valid skill with the file it came from and the sha256 of the file's bytes."""

    skill: Skill
    file: Path
    sha256: str


# (path, sha256 of the bytes) -> parse result. A campaign loads its library several times a round; parsing and
# checking 30 YAML front matters cost ~0.3 s each time, re-reading the bytes almost nothing. Skills are
# treated as values everywhere (changes go through validated copies), so sharing the parsed objects is safe.
_PARSED: dict[tuple[str, str], tuple[Skill | None, list[Problem]]] = {}


def _checked(file: Path) -> tuple[Skill | None, list[Problem], str]:
    try:
        data = file.read_bytes()
    except OSError:
        skill, found = check_file(file)  # it reports the error with the file and field
        return skill, found, ""
    sha = content_hash(data)
    key = (str(file), sha)
    if key not in _PARSED:
        if len(_PARSED) > 4096:
            _PARSED.clear()
        try:
            _PARSED[key] = check_text(data.decode("utf-8"), file.parent.name, str(file))
        except UnicodeDecodeError:
            _PARSED[key] = check_file(file)  # it names the offending byte
    skill, found = _PARSED[key]
    return skill, list(found), sha


class Library:
    """The valid entries of a library folder, by slug, and the problems of the others."""

    def __init__(self, path: Path, entries: Sequence[Entry] = (), problems: Sequence[Problem] = ()):
        self.path = path
        self._entries = {e.skill.slug: e for e in sorted(entries, key=lambda e: e.skill.slug)}
        self.problems = list(problems)

    @classmethod
    def load(cls, path: str | Path | None = None, *, strict: bool = True) -> Library:
        """Load ``path`` (see :func:`resolve_library`). Strict: any problem raises ``ConfigError`` naming file and field.

        Folders whose name starts with '.' or '_' are ignored, so are plain files beside the folders (the
        curation log, a README).
        """
        root = resolve_library(path)
        if not root.is_dir():
            raise ConfigError(f"skill library not found: {root} (a folder of <slug>/{SKILL_FILE}; "
                              f"pass --library or set ${LIBRARY_ENV})")
        entries: list[Entry] = []
        problems: list[Problem] = []
        for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            file = d / SKILL_FILE
            if not file.is_file():
                problems.append(Problem(path=str(d), field="(file)", message=f"folder has no {SKILL_FILE}"))
                continue
            skill, found, sha = _checked(file)
            if skill is None:
                problems.extend(found)
            else:
                entries.append(Entry(skill=skill, file=file, sha256=sha))
        slugs = {e.skill.slug for e in entries}
        for e in entries:
            target = e.skill.merged_into
            if target is not None and target not in slugs:
                problems.append(Problem(path=str(e.file), field="merged_into",
                                        message=f"'{target}' is not an entry of this library"))
        lib = cls(root, entries, problems)
        if strict and problems:
            lines = "\n".join(f"  - {p.line()}" for p in problems)
            raise ConfigError(f"{root}: {len(problems)} problem(s) in the skill library "
                              f"(see `evotrainer skills lint`):\n{lines}")
        return lib

    # ------------------------------------------------------------------------------------------ reading
    @property
    def skills(self) -> list[Skill]:
        """Every valid entry (skills and mistake notes, deprecated ones included), by slug."""
        return [e.skill for e in self._entries.values()]

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self.skills)

    def __contains__(self, slug: object) -> bool:
        return slug in self._entries

    def find(self, slug: str) -> Skill | None:
        e = self._entries.get(slug)
        return e.skill if e is not None else None

    def get(self, slug: str) -> Skill:
        """The entry ``slug``; ``ConfigError`` naming some that exist when it is not there (or when ``slug`` is not
        a name at all: a path such as ``../x`` is refused by the one name rule before any lookup)."""
        check_name(slug, "skill slug")
        e = self._entries.get(slug)
        broken = [x for x in self.problems if Path(x.path).name == slug or Path(x.path).parent.name == slug]
        if e is None and broken:  # there, but not valid: say why instead of "no skill"
            raise ConfigError(f"skill '{slug}' in {self.path} is not valid: " + "; ".join(x.line() for x in broken)
                              + " (see `evotrainer skills lint`)")
        if e is None:
            known = ", ".join(list(self._entries)[:12]) + (", …" if len(self._entries) > 12 else "")
            raise ConfigError(f"no skill '{slug}' in {self.path}; entries: {known or '(none)'}")
        return e.skill

    def entry(self, slug: str) -> Entry:
        self.get(slug)
        return self._entries[slug]

    def filter(self, *, kind: str | None = None, symptom: str | None = None,
               include_deprecated: bool = True) -> list[Skill]:
        return [s for s in self.skills
                if (kind is None or s.kind == kind)
                and (symptom is None or symptom in s.symptoms)
                and (include_deprecated or s.active)]


def write_skill(library: str | Path, skill: Skill) -> Path:
    """Write ``<library>/<slug>/SKILL.md`` in canonical form, atomically (a reader never sees half a file)."""
    folder = Path(library) / skill.slug
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / SKILL_FILE
    atomic.write_text(target, dump_skill(skill))
    return target


def lint_library(path: str | Path) -> list[Problem]:
    """Every problem in the library folder (empty list = clean)."""
    return Library.load(path, strict=False).problems


__all__ = ["Library", "lint_library", "Entry", "resolve_library", "write_skill", "content_hash", "LIBRARY_ENV", "CURATION_LOG",
           "relative"]
