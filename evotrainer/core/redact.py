"""Credentials are never printed: one function masks them in any text that may hold a URL or a DSN.

Why one place: the state store's URL, the LangGraph checkpointer's, MLflow's tracking URI and the LLM endpoint all
reach error messages, logs and summaries, in three forms that each hide a secret differently: a URL's userinfo
(``postgresql://u:SECRET@host/db``), a query parameter (``...?password=SECRET``, ``?token=...``), and libpq's
keyword/value DSN (``host=h password=SECRET``), plus a token used as a URL's user name. SQLAlchemy's ``render_as_string(hide_password=True)`` covers the
first form only.
"""

from __future__ import annotations

import re

MASK = "***"
_SECRET_KEYS = (r"(?:(?!(?:pad|eos|bos|unk|sep|cls|mask)_token\b)"
                r"[A-Za-z0-9_.\-]*(?:password|passwd|secret|token|api[_-]?key|signature|credential|access_key)"
                r"(?:[_.\-]?key)?|[A-Za-z0-9_.\-]*(?:secret|private|client)[_.\-]?key|pwd|pass|key|auth|sig)")
"""Keys whose value is a secret: any key ending in a secret word (``client_secret``, ``X-Amz-Signature``,
``aws_secret_access_key``, ``refresh_token``, ``secret_key``, ``api-key``), or a short one exactly (``key``,
``sig``). Plurals are counts, not secrets (``max_tokens``), and a tokenizer's special tokens (``pad_token``,
``eos_token``) are not secrets either."""
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@\s?#]*):(?P<pw>[^\s/]*)@")
_TOKEN_USER = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[A-Za-z0-9_\-.~%]{20,})@")
"""A user name of 20 characters or more with no password: a token used as the user (``https://ghp_...@github.com``)."""
_QUERY = re.compile(rf"(?P<k>[?&;#]{_SECRET_KEYS}=)(?P<v>[^&#\s]*)", re.IGNORECASE)
_KEYWORD = re.compile(rf"(?P<k>(?:^|(?<=[\s,(]))(?:{_SECRET_KEYS})\s*=\s*)(?P<v>'(?:[^'\\]|\\.)*'|[^\s,)]+)",
                      re.IGNORECASE)


def mask(text: object) -> str:
    """``text`` as a string with every password, token or secret in a URL or DSN replaced by ``***``."""
    s = str(text)
    s = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK if len(m['user']) >= 20 else m['user']}:{MASK}@", s)
    s = _TOKEN_USER.sub(lambda m: f"{m['scheme']}{MASK}@", s)
    s = _QUERY.sub(lambda m: f"{m['k']}{MASK}", s)
    return _KEYWORD.sub(lambda m: f"{m['k']}{MASK}", s)
