"""The dashboard's routes, one ``APIRouter`` per area: sign-in, campaigns, reviews, skills, runs.

``create_app`` (``ui.app``) owns what every route shares — the store, the cached views, the security guard, the
page renderer and the check every write passes — and hands it to each router as :class:`Deps`, so a router is a
plain list of pages and forms with no set-up of its own, and an area can be tested or mounted on its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from evotrainer.core.errors import EvoError
from evotrainer.reports.summaries import record_review
from evotrainer.store import NotFound, Store
from evotrainer.ui.security import CSRF_FIELD, SESSION_COOKIE, Guard, safe_next
from evotrainer.ui.views import Views

STATIC = Path(__file__).resolve().parent / "static"
REVIEWER_COOKIE = "evotrainer_reviewer"


@dataclass(frozen=True)
class Deps:
    """What the routes share, built once by ``create_app``."""

    home: Path
    store: Store
    views: Views
    guard: Guard
    render: Callable[..., HTMLResponse]  # (request, template, http_status=200, **context)
    authorize: Callable[[Request], Awaitable[FormData]]  # origin, token, CSRF: every state-changing request
    sign_in: Callable[[Response], None]  # set the session cookie


def auth_routes(d: Deps) -> APIRouter:
    """Sign in with the dashboard token, and sign out."""
    router = APIRouter()

    @router.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, next: str = "/") -> HTMLResponse:
        return d.render(request, "login.html.j2", next=safe_next(next), error="")

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not d.guard.origin_ok(request):
            raise HTTPException(403, "refused: the sign-in form was posted from another site")
        form = await request.form()
        if not d.guard.csrf_ok(request, form.get(CSRF_FIELD)):  # type: ignore[arg-type]
            raise HTTPException(403, "the form's CSRF token does not match this browser's: reload the page")
        target = safe_next(str(form.get("next") or "/"))
        if not d.guard.token_ok(str(form.get("token") or "").strip()):
            return await run_in_threadpool(d.render, request, "login.html.j2", 403, next=target,
                                           error="That is not this dashboard's token.")
        response = RedirectResponse(target, status_code=303)
        d.sign_in(response)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        await d.authorize(request)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return router


def campaign_routes(d: Deps) -> APIRouter:
    """The campaign list, one campaign's page and live state, and stopping it."""
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse)
    def campaigns_page(request: Request) -> HTMLResponse:
        return d.render(request, "campaigns.html.j2", rows=d.views.campaigns())

    @router.get("/campaigns/{cid}", response_class=HTMLResponse)
    def campaign_page(request: Request, cid: str, page: int = 1, dpage: int = 1) -> HTMLResponse:
        return d.render(request, "campaign.html.j2", **d.views.campaign(cid, page, dpage))

    @router.get("/campaigns/{cid}/state.json")
    def campaign_state(cid: str) -> JSONResponse:
        return JSONResponse(d.views.state(cid))

    @router.post("/campaigns/{cid}/stop")
    async def stop(request: Request, cid: str) -> Response:
        await d.authorize(request)
        from evotrainer.agent.campaign import stop_campaign

        camp = await run_in_threadpool(d.store.get_campaign, cid)
        if camp.status not in ("created", "running", "waiting_review"):
            raise HTTPException(409, f"campaign {cid} is {camp.status}; there is nothing to stop")
        await run_in_threadpool(stop_campaign, cid, d.home, False, 0.0)  # signal the owner; the page shows the rest
        return RedirectResponse(f"/campaigns/{quote(cid, safe='')}?done=stop", status_code=303)

    return router


def review_routes(d: Deps) -> APIRouter:
    """The review queue, a proposal's page, and approving or rejecting it."""
    router = APIRouter()

    @router.get("/reviews", response_class=HTMLResponse)
    def reviews_page(request: Request, page: int = 1) -> HTMLResponse:
        return d.render(request, "reviews.html.j2", **d.views.review_queue(page))

    @router.get("/proposals/{pid}", response_class=HTMLResponse)
    def proposal_page(request: Request, pid: str) -> HTMLResponse:
        return d.render(request, "proposal.html.j2", error="", comment="", **d.views.proposal(pid))

    @router.post("/proposals/{pid}/review")
    async def review(request: Request, pid: str) -> Response:
        form = await d.authorize(request)

        verdict = str(form.get("verdict") or "")
        comment = str(form.get("comment") or "").strip()
        who = str(form.get("reviewer") or "").strip()[:200]
        if verdict not in ("approve", "reject"):
            raise HTTPException(400, f"verdict must be approve or reject, got {verdict!r}")
        try:
            await run_in_threadpool(record_review, d.store, pid, verdict, comment, who)
        except NotFound:
            raise
        except EvoError as err:
            data = await run_in_threadpool(d.views.proposal, pid)
            return await run_in_threadpool(d.render, request, "proposal.html.j2", 409, error=str(err), comment=comment,
                                           **data)
        response = RedirectResponse(f"/proposals/{quote(pid, safe='')}?done={verdict}", status_code=303)
        response.set_cookie(REVIEWER_COOKIE, who, httponly=True, samesite="strict", path="/", max_age=365 * 86400)
        return response

    return router


def skill_routes(d: Deps) -> APIRouter:
    """The skill library: search and filter, and one skill's page with its history."""
    router = APIRouter()

    @router.get("/skills", response_class=HTMLResponse)
    def skills_page(request: Request, lib: str = "default", q: str = "", kind: str = "", symptom: str = "",
                    domain: str = "", status: str = "", page: int = 1) -> HTMLResponse:
        data = d.views.skills(lib, q, kind, symptom, domain, status, page)
        keep = {k: v for k, v in (("lib", "" if lib == "default" else lib), ("q", q), ("kind", kind),
                                  ("symptom", symptom), ("domain", domain), ("status", status)) if v}
        base = "/skills?" + (urlencode(keep) + "&" if keep else "")
        return d.render(request, "skills.html.j2", q=q, kind=kind, symptom=symptom, domain=domain, status=status,
                      pager_base=base, **data)

    @router.get("/skills/{slug}", response_class=HTMLResponse)
    def skill_page(request: Request, slug: str, lib: str = "default") -> HTMLResponse:
        return d.render(request, "skill.html.j2", **d.views.skill(lib, slug))

    return router


def run_routes(d: Deps) -> APIRouter:
    """Any run under the home, diagnosed on the page; and the favicon."""
    router = APIRouter()

    @router.get("/diagnose", response_class=HTMLResponse)
    def runs_page(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
        return d.render(request, "runs.html.j2", **d.views.runs(q, page))

    @router.get("/diagnose/{name}", response_class=HTMLResponse)
    def diagnose_page(request: Request, name: str) -> HTMLResponse:
        return d.render(request, "diagnose.html.j2", **d.views.diagnose(name))

    @router.get("/favicon.ico")
    def favicon() -> FileResponse:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    return router


__all__ = ["Deps", "auth_routes", "campaign_routes", "review_routes", "skill_routes", "run_routes"]
