"""The review dashboard: a FastAPI app of server-rendered pages over one home's store, jobs and skill library.

``create_app(home, token=...)`` builds it; ``evotrainer ui`` serves it with uvicorn. Pages are Jinja2 templates
with autoescaping on (rollout text, skill bodies and LLM rationales are untrusted), plots are SVG drawn on the
server (``ui.charts``), and the only script is ``static/app.js`` (live refresh of a running campaign, and a
confirmation before stopping one). The Content Security Policy allows scripts and styles from this server
only, so even text that escaped escaping could not run.

Reads go through ``ui.views`` (batched queries, cached file reads); the three writes — approve, reject, stop —
go through ``evotrainer.reports.summaries.record_review`` and ``agent.campaign.stop_campaign``, the functions the CLI
uses, behind the token, CSRF and Origin checks of ``ui.security``. The pages and forms are ``APIRouter``s in
``ui.routes``; this module builds what they share (middleware, error pages, the renderer, ``authorize``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from evotrainer.core.errors import EvoError
from evotrainer.core.home import resolve_home
from evotrainer.core.names import check_name
from evotrainer.store import NotFound, Store
from evotrainer.ui.routes import (
    REVIEWER_COOKIE,
    Deps,
    auth_routes,
    campaign_routes,
    review_routes,
    run_routes,
    skill_routes,
)
from evotrainer.ui.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    Guard,
    is_loopback,
    new_token,
    safe_next,
)
from evotrainer.ui.views import Views

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
OPEN_PATHS = ("/login", "/static/", "/favicon.ico")


def bad_segment(path: str) -> str | None:
    """Why a URL path is refused, or None: every segment (a campaign id, a proposal id, a skill slug, a run name)
    follows the one name rule of ``evotrainer.core.names``, ':'-joined parts allowed (proposal ids). ``path`` is the
    decoded path, so an encoded ``..`` or ``/`` is seen as what it is."""
    for seg in path.split("/"):
        if seg:
            try:
                check_name(seg, "URL path segment", compound=True)
            except EvoError as err:
                return str(err)
    return None


# ------------------------------------------------------------------------------------------ template helpers
def _pct(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * float(x):.{digits}f} %"


def _num(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{float(x):.{digits}g}"


def _signed(x: Any, scale: float = 100.0) -> str:
    return "–" if x is None else f"{float(x) * scale:+.2f}"


def _when(dt: Any) -> str:
    if dt is None:
        return "–"
    if isinstance(dt, (int, float)):
        dt = datetime.fromtimestamp(dt, timezone.utc)
    if isinstance(dt, str):
        dt = datetime.fromisoformat(dt)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _ago(dt: Any) -> str:
    if dt is None:
        return ""
    if isinstance(dt, str):
        dt = datetime.fromisoformat(dt)
    s = max(0, int((datetime.now(timezone.utc) - dt).total_seconds()))
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s // n} {unit} ago"
    return f"{s} s ago"


def _value(v: Any) -> str:
    """A knob value as JSON (None → null, strings quoted), which is how harness files and the CLI show it."""
    return json.dumps(v, default=str)


@functools.cache
def _markdown_parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _markdown(text: str) -> Markup:
    """Markdown with raw HTML disabled (escaped) and unsafe link schemes dropped by markdown-it's validator."""
    return Markup(_markdown_parser().render(text or ""))


def _qs(**params: Any) -> str:
    """'?a=1&b=2' of the parameters that are set ('' when none is)."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pct=_pct, num=_num, signed=_signed, when=_when, ago=_ago, value=_value, md=_markdown,
                       seg=lambda s: quote(str(s), safe=""))
    env.globals["qs"] = _qs
    return env


# ------------------------------------------------------------------------------------------ the app
def _signer(guard: Guard) -> Callable[[Response], None]:
    """What signs a browser in: the session cookie, httponly and same-site."""

    def _sign_in(response: Response) -> None:
        response.set_cookie(SESSION_COOKIE, guard.session_value(), httponly=True, samesite="strict", path="/")

    return _sign_in


def _authorizer(guard: Guard) -> Callable[[Request], Awaitable[FormData]]:
    """The check every state-changing request passes (approve, reject, stop, sign-in forms)."""

    async def authorize(request: Request) -> FormData:
        """Origin, then token (401 none / 403 wrong), then CSRF: what every state-changing request passes."""
        if not guard.origin_ok(request):
            raise HTTPException(403, "refused: this request comes from another site (Origin/Referer is not this "
                                     "dashboard)")
        cred = guard.credential(request)
        if cred is None:
            raise HTTPException(401, "sign in with the dashboard token first (printed by `evotrainer ui` at start-up)")
        if cred == "bad":
            raise HTTPException(403, "the dashboard token is wrong or from an earlier start: sign in again")
        form = await request.form()
        if not guard.csrf_ok(request, form.get(CSRF_FIELD)):  # type: ignore[arg-type]
            raise HTTPException(403, "the form's CSRF token does not match this browser's: reload the page and "
                                     "submit again")
        return form

    return authorize


def _install_middleware(app: FastAPI, guard: Guard, render: Callable[..., HTMLResponse],
                        sign_in: Callable[[Response], None]) -> None:
    """Every response passes here: the host check (DNS rebinding), the CSRF nonce, a refused path segment, the
    start-up link's token, sign-in for non-public reads, a page's crash as an error page, and the security headers."""

    @app.middleware("http")
    async def frame(request: Request, call_next: Any) -> Response:
        if not guard.host_ok(request):
            return Response("this dashboard answers to localhost / 127.0.0.1 only (DNS rebinding protection)",
                            status_code=400, media_type="text/plain")
        nonce = request.cookies.get(CSRF_COOKIE)
        fresh = not nonce or len(nonce) > 64
        if fresh:
            nonce = guard.new_nonce()
        request.state.csrf = guard.csrf_field(nonce)
        path = request.url.path
        response: Response
        if (bad := bad_segment(request.scope.get("path", path))) is not None:  # before any route sees the name
            response = await run_in_threadpool(render, request, "error.html.j2", 400, code=400, message=bad,
                                               login=False)
        elif request.method == "GET" and "token" in request.query_params:
            response = _token_link(request)
        elif not guard.public_reads and not guard.signed_in(request) and not path.startswith(OPEN_PATHS):
            response = RedirectResponse("/login" + "?" + urlencode({"next": _here(request)}), status_code=303)
        else:
            try:
                response = await call_next(request)
            except Exception as exc:  # noqa: BLE001 - a page's bug still answers with this middleware's headers
                traceback.print_exception(exc, file=sys.stderr)
                response = await run_in_threadpool(render, request, "error.html.j2", 500, code=500, login=False,
                                                   message=f"this page failed ({type(exc).__name__}); the dashboard's "
                                                           "log has the details")
        if fresh:
            response.set_cookie(CSRF_COOKIE, nonce, httponly=True, samesite="strict", path="/")
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        if response.headers.get("content-type", "").startswith("text/html"):
            response.headers["Cache-Control"] = "no-store"
        return response

    def _here(request: Request) -> str:
        q = {k: v for k, v in request.query_params.items() if k != "token"}
        return request.url.path + ("?" + urlencode(q) if q else "")

    def _token_link(request: Request) -> Response:
        """``?token=`` (the link printed at start-up): sign this browser in, then drop the token from the URL."""
        if not guard.token_ok(request.query_params.get("token")):
            return render(request, "login.html.j2", 403, next=_here(request),
                          error="That link's token is not this dashboard's token (it changes at every start "
                                "unless $EVOTRAINER_UI_TOKEN is set). Paste the current one.")
        response = RedirectResponse(safe_next(_here(request)), status_code=303)
        sign_in(response)
        return response


def _install_error_pages(app: FastAPI, render: Callable[..., HTMLResponse]) -> None:
    """HTTP errors and user errors (``EvoError``) answer with the dashboard's error page, not JSON."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not hasattr(request.state, "csrf"):
            request.state.csrf = ""
        return await run_in_threadpool(render, request, "error.html.j2", exc.status_code, code=exc.status_code,
                                       message=str(exc.detail), login=exc.status_code in (401, 403))

    @app.exception_handler(EvoError)
    async def evo_error(request: Request, exc: EvoError) -> Response:
        status = 404 if isinstance(exc, NotFound) else 400
        return await run_in_threadpool(render, request, "error.html.j2", status, code=status, message=str(exc),
                                       login=False)


def create_app(home: str | Path, token: str | None = None, *, host: str = "127.0.0.1", library: Path | None = None,
               mlflow_url: str | None = None, reviewer: str | None = None) -> FastAPI:
    """The dashboard for ``home``. ``token`` guards approve / reject / stop (a random one if None: read it from
    ``app.state.token``); ``host`` is where it will be served (a non-loopback host makes every page need the
    session). ``library`` is the default skill library (``--library``, ``$EVOTRAINER_LIBRARY``, ``./skills``);
    ``mlflow_url`` (e.g. http://127.0.0.1:5000 of ``mlflow ui``) turns MLflow run ids into links."""
    home = resolve_home(home)
    store = Store.for_home(home)
    guard = Guard(token or new_token(), public_reads=is_loopback(host))
    views = Views(home, store, library, mlflow_url)
    env = _environment()
    default_reviewer = reviewer or os.environ.get("USER") or "reviewer"

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=views.warm, name="evotrainer-ui-warm", daemon=True).start()
        yield

    app = FastAPI(title="EvoTrainer review dashboard", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    app.state.token, app.state.guard, app.state.views, app.state.store = guard.token, guard, views, store
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    def render(request: Request, template: str, http_status: int = 200, **ctx: Any) -> HTMLResponse:
        base = {"request": request, "path": request.url.path, "signed_in": guard.signed_in(request),
                "csrf": request.state.csrf, "csrf_field": CSRF_FIELD, "pending_total": views.pending_count(),
                "home": str(home), "public_reads": guard.public_reads, "done": request.query_params.get("done", ""),
                "reviewer": request.cookies.get(REVIEWER_COOKIE) or default_reviewer}
        return HTMLResponse(env.get_template(template).render(**{**base, **ctx}), status_code=http_status)

    _sign_in = _signer(guard)
    authorize = _authorizer(guard)
    _install_middleware(app, guard, render, _sign_in)
    _install_error_pages(app, render)
    deps = Deps(home=home, store=store, views=views, guard=guard, render=render, authorize=authorize,
                sign_in=_sign_in)
    for routes in (auth_routes, campaign_routes, review_routes, skill_routes, run_routes):
        app.include_router(routes(deps))
    return app


__all__ = ["create_app"]
