"""The one rule for names that become paths or URL segments: run names, campaign ids, skill slugs, dashboard paths.

Why one rule: a name given on the command line or in a URL ends up as a directory under ``--home``
(``HOME/jobs/<run>``, ``HOME/campaigns/<id>``, ``skills/<slug>``). ``--name /elsewhere`` or ``--name ../x`` would
otherwise write outside the home, and every place that joins a name onto a path would need its own guard. A name
is 1 to 128 of ``A-Z a-z 0-9 - _ .``, and not ``.`` or ``..``; so it has no path separator, no drive letter, no
whitespace and nothing a shell or a URL must escape. Ids that join names with ``:`` (a proposal id
``<campaign>:r01:p0``) are checked part by part with ``compound=True``.

Skill slugs have a stricter format of their own (lowercase words joined by single hyphens, see
``library.format``): every slug is a name, so the same check refuses a path-like slug with the same message.
"""

from __future__ import annotations

import re

from evotrainer.core.errors import ConfigError

NAME_RULE = "1-128 letters, digits, '-', '_' or '.', and not '.' or '..' (no path separators or spaces)"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def is_name(value: object) -> bool:
    """True when ``value`` is a string that follows the name rule."""
    return isinstance(value, str) and bool(_NAME.fullmatch(value)) and value not in (".", "..")


def check_name(value: object, what: str, *, compound: bool = False) -> str:
    """``value`` if it follows the name rule (with ``compound``: every ``:``-separated part does), else a
    ConfigError that names ``what`` (e.g. '--name', 'campaign id'), the value and the rule."""
    parts = value.split(":") if compound and isinstance(value, str) else [value]
    if all(is_name(p) for p in parts):
        return value  # type: ignore[return-value]
    shown = repr(value) if not isinstance(value, str) or len(value) <= 200 else repr(value[:200] + "…")
    sep = " (parts joined by ':')" if compound else ""
    raise ConfigError(f"{what} {shown} is not a valid name{sep}: use {NAME_RULE}")


def to_name(text: str, fallback: str = "x") -> str:
    """A name derived from free text (a file stem, a task 'module:Class'): other characters become '-'."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:128]
    return out if is_name(out) else fallback
