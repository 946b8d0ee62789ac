"""``evotrainer skills``: list, show, search and lint the skill library, and see where a skill was used.

The library is a folder (``--library``, else ``$EVOTRAINER_LIBRARY``, else ``./skills``); ``search`` and
``history`` also read the state store under ``--home``. ``lint`` prints one line per problem (path, field,
message) and exits 1 when there is any; other user errors exit with their ``EvoError`` code, as everywhere
in the CLI.

Options, consoles and the error guard come from ``evotrainer.cli.common``, shared with ``evotrainer.cli``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard
from evotrainer.core.errors import ConfigError

skills_app = typer.Typer(no_args_is_help=True, help="The skill library: list, show, search, lint, and where a skill was used.")

LibraryOpt = typer.Option(None, "--library", help="Skill library folder (default: $EVOTRAINER_LIBRARY, else ./skills).")


def _load(library: Path | None):
    """The library, keeping valid entries when some files are broken (with a warning that says so)."""
    from evotrainer.library.loader import Library

    lib = Library.load(library, strict=False)
    if lib.problems:
        err_console.print(f"[yellow]warning:[/] {len(lib.problems)} problem(s) in {lib.path}; invalid files are "
                          "skipped (run `evotrainer skills lint`)", highlight=False)
    return lib


def _summary(s) -> dict[str, Any]:
    return {"slug": s.slug, "name": s.name, "kind": s.kind, "status": s.status, "version": s.version,
            "available": s.intervention.available, "symptoms": s.symptoms,
            "intervention": s.intervention.model_dump(mode="json", exclude_none=True),
            "counters": s.counters.model_dump(), "evidence": len(s.evidence), "description": s.description}


@skills_app.command("list")
def skills_list(
    kind: str | None = typer.Option(None, "--kind", help="Only 'skill' or only 'mistake' entries."),
    symptom: str | None = typer.Option(None, "--symptom", help="Only entries triggered by this symptom."),
    library: Path | None = LibraryOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Entries of the library with their intervention, counters and status."""
    from evotrainer.core.symptoms import check_symptom

    def body() -> None:
        if kind is not None and kind not in ("skill", "mistake"):
            raise ConfigError(f"--kind must be 'skill' or 'mistake', got '{kind}'")
        if symptom is not None:
            try:
                check_symptom(symptom)
            except ValueError as err:
                raise ConfigError(f"--symptom: {err}") from None
        lib = _load(library)
        rows = [_summary(s) for s in lib.filter(kind=kind, symptom=symptom)]
        if as_json:
            _emit_json({"library": str(lib.path), "skills": rows}, "skills")
            return
        table = Table(title=f"Skill library {lib.path} ({len(rows)} of {len(lib)})")
        for col in ("slug", "kind", "status", "symptoms", "intervention", "h/x/uses"):
            table.add_column(col, overflow="fold")
        for r in rows:
            iv = r["intervention"]
            change = f"{iv['knob']} {iv['op']} {iv['arg']!r}" + ("" if r["available"] else " [dim](unavailable)[/]")
            c = r["counters"]
            table.add_row(r["slug"], r["kind"], r["status"], ", ".join(r["symptoms"]), change,
                          f"{c['helpful']}/{c['harmful']}/{c['uses']}")
        out_console.print(table)

    _guard(body, as_json)


@skills_app.command("show")
def skills_show(slug: str, library: Path | None = LibraryOpt, as_json: bool = JsonOpt) -> None:
    """One entry: its front matter in brief, its evidence, and its body."""

    def body() -> None:
        lib = _load(library)
        s = lib.get(slug)
        if as_json:
            _emit_json({"file": str(lib.entry(slug).file), **s.front_matter(), "slug": s.slug, "body": s.body}, "skill")
            return
        c = s.counters
        out_console.print(f"[bold]{escape(s.name)}[/] ({s.slug}, {s.kind}, {s.status}, version {s.version})", highlight=False)
        out_console.print(f"  {escape(s.description)}", highlight=False)
        out_console.print(f"  triggers: {', '.join(s.symptoms)}   change: {escape(s.intervention.describe())}", highlight=False)
        if not s.intervention.available:
            out_console.print(f"  unavailable: {escape(s.intervention.unavailable_reason or '')}", highlight=False)
        out_console.print(f"  counters: helpful {c.helpful}, harmful {c.harmful}, uses {c.uses}   "
                          f"sources: {escape(s.source_text())}", highlight=False)
        for e in s.evidence:
            effect = "n/a" if e.effect is None else f"{e.effect:+.3f}"
            out_console.print(f"  evidence: {e.date} {e.outcome} {effect} [{e.campaign} {e.proposal}]", highlight=False,
                              markup=False)
        if s.merged_into or s.deprecated_reason:
            out_console.print(f"  deprecated: {escape(s.deprecated_reason or '')}", highlight=False)
        out_console.print()
        out_console.print(s.body, markup=False, highlight=False)

    _guard(body, as_json)


@skills_app.command("search")
def skills_search(
    query: str,
    limit: int = typer.Option(10, "--limit", min=1, help="At most this many results."),
    library: Path | None = LibraryOpt,
    home: Path | None = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Full-text search over names, descriptions, bodies, symptoms and knobs (the store's index, re-synced first)."""
    from evotrainer.core.home import resolve_home
    from evotrainer.library.retrieve import search
    from evotrainer.store import Store

    def body() -> None:
        lib = _load(library)
        with Store.for_home(resolve_home(home)) as store:
            hits = search(lib, query, k=limit, store=store)
        if as_json:
            _emit_json({"library": str(lib.path), "query": query,
                        "hits": [h.model_dump(mode="json", exclude={"skill"}) for h in hits]}, "skill-search")
            return
        if not hits:
            out_console.print(f"no entry matches {query!r}", highlight=False, markup=False)
        for h in hits:
            flag = "" if h.status == "active" else f" ({h.status})"
            out_console.print(f"{h.text:5.2f}  [bold]{h.slug}[/]{flag}  {escape(h.description)}", highlight=False,
                              soft_wrap=True)

    _guard(body, as_json)


@skills_app.command("lint")
def skills_lint(library: Path | None = LibraryOpt, as_json: bool = JsonOpt) -> None:
    """Check every file; print one line per problem (path: field: message) and exit 1 if there is any."""
    from evotrainer.library.loader import Library

    def body() -> None:
        lib = Library.load(library, strict=False)
        if as_json:
            _emit_json({"library": str(lib.path), "entries": len(lib),
                        "problems": [p.model_dump() for p in lib.problems]}, "skill-lint")
        else:
            for p in lib.problems:
                out_console.print(p.line(), markup=False, highlight=False, soft_wrap=True)
            if not lib.problems:
                out_console.print(f"ok: {len(lib)} entries in {lib.path}", highlight=False, markup=False)
        if lib.problems:
            raise typer.Exit(code=1)

    _guard(body, as_json)


@skills_app.command("history")
def skills_history(slug: str, library: Path | None = LibraryOpt, home: Path | None = HomeOpt,
                   as_json: bool = JsonOpt) -> None:
    """Proposals (across campaigns) that cited SLUG, with their decision and held-out effect."""
    from evotrainer.core.home import resolve_home
    from evotrainer.library.loader import Library, resolve_library
    from evotrainer.reports.summaries import skill_history
    from evotrainer.store import Store

    def body() -> None:
        with Store.for_home(resolve_home(home)) as store:
            rows = skill_history(store, slug)
        root = resolve_library(library)
        known = root.is_dir() and slug in Library.load(root, strict=False)
        if as_json:
            _emit_json({"slug": slug, "in_library": known, "proposals": rows}, "skill-history")
            return
        if not known:
            err_console.print(f"[yellow]note:[/] '{escape(slug)}' is not an entry of {root}", highlight=False)
        if not rows:
            out_console.print(f"no proposal cites '{slug}' yet", highlight=False, markup=False)
        for r in rows:
            effect = "" if r["effect"] is None else f"  effect {r['effect']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
            out_console.print(f"{r['campaign']} r{r['round']} {r['proposal']}  {r['knob']}: {r['old']!r} → {r['new']!r}  "
                              f"({r['symptom']})  {r['outcome'] or r['status']}{effect}", highlight=False, markup=False,
                              soft_wrap=True)

    _guard(body, as_json)
