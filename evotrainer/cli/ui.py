"""``evotrainer ui``: serve the review dashboard (``evotrainer.ui``) for one home with uvicorn.

It binds 127.0.0.1 unless told otherwise. Approving, rejecting and stopping need a token: the one in
``$EVOTRAINER_UI_TOKEN``, else a random one printed at start-up together with a link that signs the browser
in. Binding any other address without ``$EVOTRAINER_UI_TOKEN`` is refused (exit 2), because the dashboard
would then be reachable from other machines with a token nobody chose.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional

import typer

from evotrainer.cli.common import HomeOpt, err_console, out_console
from evotrainer.cli.common import guard as _guard
from evotrainer.core.errors import ConfigError


def ui_cmd(
    home: Optional[Path] = HomeOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (another than loopback needs $EVOTRAINER_UI_TOKEN)."),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="TCP port."),
    library: Optional[Path] = typer.Option(None, "--library", help="Default skill library (default: $EVOTRAINER_LIBRARY, else ./skills)."),
    mlflow_url: Optional[str] = typer.Option(None, "--mlflow-url", help="URL of a running `mlflow ui` (e.g. http://127.0.0.1:5000): run ids become links."),
) -> None:
    """Serve the review dashboard: campaigns, proposals to approve or reject, the skill library, diagnoses."""
    from evotrainer.core.home import resolve_home
    from evotrainer.ui.security import TOKEN_ENV, check_bind, new_token

    def body() -> None:
        chosen = os.environ.get(TOKEN_ENV) or None
        check_bind(host, chosen)
        _check_port(host, port)
        import uvicorn

        from evotrainer.ui import create_app

        h = resolve_home(home)
        token = chosen or new_token()
        app = create_app(h, token, host=host, library=library, mlflow_url=mlflow_url)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown}:{port}/"
        out_console.print(f"[bold]EvoTrainer review dashboard[/] for {h}", highlight=False)
        if chosen:
            out_console.print(f"  open   {url}   (sign in with the token in ${TOKEN_ENV} to approve / reject / stop)",
                              highlight=False, soft_wrap=True)
        else:
            out_console.print(f"  open   {url}?token={token}", highlight=False, soft_wrap=True)
            out_console.print(f"  token  {token}   (the link above signs this browser in; set ${TOKEN_ENV} to choose "
                              "your own)", highlight=False, soft_wrap=True)
        out_console.print("  stop   Ctrl+C", highlight=False)
        uvicorn.run(app, host=host, port=port, log_level="warning")

    _guard(body)


def _check_port(host: str, port: int) -> None:
    """Say which port is taken, instead of uvicorn's bare 'address already in use'."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            err_console.print(f"[dim]{err}[/]", highlight=False)
            raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror}); pass another --port, or stop what "
                              "is using it") from None
