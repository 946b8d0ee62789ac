"""Lint: every problem of every skill file as one line naming the file, the field and what is allowed.

Why a list and not the first exception: a person fixing a library wants every broken file at once, and the
campaign must keep working from the valid files while one is being fixed, so ``Library.load(strict=False)``
keeps the problems beside the skills. ``evotrainer skills lint`` prints them and exits 1; a strict load
raises one ``ConfigError`` that lists them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from evotrainer.library.format import SKILL_FILE, SLUG_PATTERN, FrontMatterError, Skill, parse_skill


class Problem(BaseModel):
    """One thing wrong with one file: ``field`` is the pydantic location (``triggers.0.symptom``) or a part
    of the file (``front matter``, ``body``, ``slug``, ``(file)``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    field: str
    message: str

    def line(self) -> str:
        return f"{self.path}: {self.field}: {self.message}"


def _sub_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):  # list[Trigger], Intervention | None
        found = _sub_model(arg)
        if found is not None:
            return found
    return None


def _short(value: Any, limit: int = 60) -> str:
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def problems_from(err: ValidationError, path: str) -> list[Problem]:
    """A pydantic error as problems: the field path, the message, the value given, and what the field is for.

    Unknown keys list the keys allowed at that place (the front matter's own keys at the top level).
    """
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        model: type[BaseModel] | None = Skill
        info = None
        for part in loc[:-1] if e["type"] == "extra_forbidden" else loc:
            if model is None or not isinstance(part, str) or part not in model.model_fields:
                continue  # list indices keep the current model
            info = model.model_fields[part]
            model = _sub_model(info.annotation)
        if e["type"] == "extra_forbidden":
            allowed = [k for k in (model.model_fields if model else {}) if not (model is Skill and k in ("slug", "body"))]
            out.append(Problem(path=path, field=field, message=f"unknown key; allowed here: {', '.join(allowed)}"))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        shown = "" if isinstance(got, (dict, list)) or loc[-1:] == ("body",) or not loc else f" (got {_short(got)})"
        doc = f". {info.description}" if info is not None and info.description and e["type"] != "value_error" else ""
        out.append(Problem(path=path, field=field, message=f"{msg}{shown}{doc}"))
    return out


def check_text(text: str, slug: str, path: str) -> tuple[Skill | None, list[Problem]]:
    """Parse one file's text; the skill if valid, else None with every problem found."""
    problems = []
    if not re.match(SLUG_PATTERN, slug):
        problems.append(Problem(path=path, field="slug", message=f"folder name '{slug}' is not a valid slug: use "
                                "lowercase letters, digits and single hyphens (e.g. clip-higher)"))
    try:
        skill = parse_skill(text, slug)
    except FrontMatterError as err:
        return None, [*problems, Problem(path=path, field=err.field, message=str(err))]
    except ValidationError as err:
        found = problems_from(err, path)
        seen = {p.field for p in problems}
        return None, [*problems, *(p for p in found if p.field not in seen)]
    return (skill, []) if not problems else (None, problems)


def check_file(file: Path, slug: str | None = None) -> tuple[Skill | None, list[Problem]]:
    """Read and check ``<slug>/SKILL.md``; the slug defaults to the folder name."""
    slug = slug if slug is not None else file.parent.name
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        return None, [Problem(path=str(file), field="(file)", message=f"not UTF-8 text: {err.reason} at byte {err.start}")]
    except OSError as err:
        return None, [Problem(path=str(file), field="(file)", message=f"cannot read: {err.strerror or err}")]
    return check_text(text, slug, str(file))


__all__ = ["Problem", "check_text", "check_file", "problems_from", "SKILL_FILE"]
