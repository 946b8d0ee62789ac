"""A real MLflow tracking server on 127.0.0.1 for the tests: ``mlflow server`` from this venv on a free port.

    with MlflowServer(tmp_path) as srv:
        os.environ["EVOTRAINER_MLFLOW_URI"] = srv.uri     # http://127.0.0.1:PORT

It keeps its runs in its own SQLite database (``DIR/server.db``) and serves artifacts itself (proxied,
``mlflow-artifacts:/``, stored under ``DIR/artifacts``), as a team server would: clients need no access to
its disk. The server runs in a new session (process group); ``__exit__`` sends SIGTERM to the group, SIGKILL
after 5 s, and waits, so no worker is left behind. ``__enter__`` waits until ``/health`` answers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class MlflowServer:
    def __init__(self, root: Path, start_timeout_s: float = 180.0):
        self.root = Path(root)
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        mlflow = Path(sys.executable).with_name("mlflow")
        cmd = [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
               "--artifacts-destination", str(self.root / "artifacts")]
        self.log = open(self.root / "server.log", "w")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(cmd, cwd=self.root, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     env={**os.environ, "MLFLOW_ENABLE_TELEMETRY": "false", "DO_NOT_TRACK": "1",
                                          # no background job runner (huey consumers): nothing here uses it
                                          "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError(f"mlflow server did not answer within {self.start_timeout_s}s: {self.tail()}")

    def tail(self) -> str:
        try:
            return (self.root / "server.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)  # uvicorn waits for clients' keep-alive connections to close
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        try:  # workers left in the group (the server's own children) go too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()
