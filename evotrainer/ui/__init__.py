"""The review dashboard (``evotrainer ui``): follow campaigns, review proposals, browse the skill library, diagnose runs.

- ``app``: ``create_app(home, token=...)`` — the FastAPI app, its routes and its middleware.
- ``views``: what each page shows, from the store, the job directories and the library (batched, cached).
- ``security``: the token, session, CSRF, Origin and Host rules, and the bind check.
- ``charts``: server-side SVG line and interval charts.
- ``templates/``: Jinja2 pages (autoescaped); ``static/``: the stylesheet, one small script, the icon.

It is built on the same store, library and report functions as the CLI: there is no second source of truth.
"""

from evotrainer.ui.app import create_app

__all__ = ["create_app"]
