"""Who may change what in the dashboard: the token, the session cookie, CSRF, and the Origin and Host checks.

The threat is not a stranger on the network (the server binds to 127.0.0.1 unless told otherwise) but a web
page in the reviewer's own browser: any site can make the browser send a form to ``http://127.0.0.1:8765``,
or point a DNS name at 127.0.0.1 and read the answers. So:

* **Token.** Approve, reject and stop need the token the server printed at start-up (or
  ``$EVOTRAINER_UI_TOKEN``). A browser proves it once — the login form, or the ``?token=`` link printed at
  start-up — and gets an HttpOnly, SameSite=Strict session cookie holding an HMAC of the token (never the
  token). A script may instead send ``Authorization: Bearer TOKEN``. No token: 401; a wrong one: 403.
* **CSRF.** Every form carries ``csrf_token`` = HMAC(token-derived key, nonce), where the nonce is a random
  value in its own cookie; a POST whose field does not match its cookie is refused (403), so a page that
  cannot read our cookies cannot forge a form, even if it could plant one.
* **Origin.** A POST whose ``Origin`` (or, without one, ``Referer``) is not this server is refused (403).
* **Host.** On a loopback bind only loopback host names are served (400 otherwise), which defeats DNS
  rebinding; read-only pages then need no token. On any other bind every page needs the session, and the
  server refuses to start without an explicit token (``check_bind``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

from evotrainer.core.errors import ConfigError

TOKEN_ENV = "EVOTRAINER_UI_TOKEN"
SESSION_COOKIE = "evotrainer_session"
CSRF_COOKIE = "evotrainer_csrf"
CSRF_FIELD = "csrf_token"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1); 0.0.0.0 and :: are not loopback."""
    h = host.strip().strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without an explicit token, and refuse a short token."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"${TOKEN_ENV} is {len(token)} characters; use at least {MIN_TOKEN_CHARS} random ones "
                          "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    if not is_loopback(host) and not token:
        raise ConfigError(f"refusing to bind {host}: it is reachable from other machines, so every page and action "
                          f"needs a token you choose. Set {TOKEN_ENV} (at least {MIN_TOKEN_CHARS} random characters) "
                          "and start again, or bind 127.0.0.1 (the default) and use an SSH tunnel")


def _host_name(netloc: str) -> str:
    """'127.0.0.1:8765' -> '127.0.0.1'; '[::1]:8765' -> '::1'."""
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0].lower()
    return netloc.rsplit(":", 1)[0].lower() if netloc.count(":") == 1 else netloc.lower()


@dataclass
class Guard:
    """The checks of one running dashboard; ``public_reads`` is True on a loopback bind."""

    token: str
    public_reads: bool = True
    _key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._key = hashlib.sha256(b"evotrainer-ui\0" + self.token.encode()).digest()

    def _mac(self, what: bytes) -> str:
        return hmac.new(self._key, what, hashlib.sha256).hexdigest()

    # ------------------------------------------------------------------------------------------ token, session
    def token_ok(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(candidate.encode(), self.token.encode())

    def session_value(self) -> str:
        return self._mac(b"session")

    def credential(self, request: Request) -> str | None:
        """'session' or 'bearer' when the request proves the token, 'bad' when it tries and fails, else None."""
        auth = request.headers.get("authorization", "")
        if auth:
            scheme, _, value = auth.partition(" ")
            return "bearer" if scheme.lower() == "bearer" and self.token_ok(value.strip()) else "bad"
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie is None:
            return None
        return "session" if hmac.compare_digest(cookie.encode(), self.session_value().encode()) else "bad"

    def signed_in(self, request: Request) -> bool:
        return self.credential(request) in ("session", "bearer")

    # ------------------------------------------------------------------------------------------ CSRF
    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(18)

    def csrf_field(self, nonce: str) -> str:
        return self._mac(b"csrf\0" + nonce.encode())

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), self.csrf_field(nonce).encode())

    # ------------------------------------------------------------------------------------------ origin, host
    @staticmethod
    def origin_ok(request: Request) -> bool:
        """The POST comes from a page of this server (Origin, else Referer); a request with neither is a
        non-browser client, which the token and CSRF checks still cover."""
        host = request.headers.get("host", "")
        origin = request.headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin)
            return origin != "null" and parts.netloc.lower() == host.lower() and parts.scheme in ("http", "https")
        referer = request.headers.get("referer")
        if referer is not None:
            return urlsplit(referer).netloc.lower() == host.lower()
        return True

    def host_ok(self, request: Request) -> bool:
        if not self.public_reads:
            return True  # a non-loopback bind answers to whatever name reaches it; everything needs the session
        return _host_name(request.headers.get("host", "")) in LOOPBACK_NAMES or is_loopback(
            _host_name(request.headers.get("host", "")))


def safe_next(target: str | None) -> str:
    """A local path to go back to after signing in (never another site: '//evil' and 'http://…' become '/')."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


__all__ = ["Guard", "check_bind", "is_loopback", "new_token", "safe_next", "TOKEN_ENV", "SESSION_COOKIE",
           "CSRF_COOKIE", "CSRF_FIELD", "MIN_TOKEN_CHARS"]
