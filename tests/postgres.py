"""A throw-away PostgreSQL server for the tests: ``initdb`` into a temp dir, ``postgres`` on 127.0.0.1:<free port>.

    with PostgresServer() as pg:
        url = pg.new_database()          # postgresql+psycopg://postgres@127.0.0.1:PORT/t1 (the state store)
        pg.checkpoint_url(url)           # postgresql://postgres@127.0.0.1:PORT/t1 (LangGraph's checkpointer)

The cluster lives in a fresh ``/tmp/evotrainer-pg-*`` directory (data, log and the unix socket), trusts local
connections, and runs with fsync off (nothing here needs to survive a crash of the machine). ``__exit__`` stops
it with ``pg_ctl stop -m fast``, kills the postmaster if that fails, and removes the directory, so no process
or file is left behind.

PostgreSQL refuses to run as root. As root, the server runs as Debian's ``postgres`` system user (the
``postgresql`` package creates it), through ``subprocess``'s ``user=``/``group=``; the temp dir is handed to
that user. The binaries are found on PATH or under ``/usr/lib/postgresql/*/bin`` (Debian keeps them there);
when they are missing the error says what to install (``make test`` installs Debian's ``postgresql``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

INSTALL_HINT = ("install PostgreSQL's server binaries: `apt-get install postgresql` on Debian/Ubuntu (`make test` "
                "does it), or put a directory holding initdb and pg_ctl on PATH")


class PostgresMissing(RuntimeError):
    """No initdb/pg_ctl, no psycopg, or no unprivileged user to run the server as (root only)."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then Debian's newest /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, start_timeout_s: float = 60.0):
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.root: Path | None = None
        self._user: dict = {}
        self._n = 0
        self.bindir: Path | None = None

    # ---------------------------------------------------------------------------------------------- urls
    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    @staticmethod
    def checkpoint_url(state_url: str) -> str:
        """The same database as a plain libpq URL (what ``langgraph-checkpoint-postgres`` takes)."""
        return state_url.replace("postgresql+psycopg://", "postgresql://", 1)

    def new_database(self) -> str:
        """CREATE DATABASE t<n> (empty) and return its SQLAlchemy URL."""
        import psycopg

        self._n += 1
        name = f"t{self._n}"
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    # ---------------------------------------------------------------------------------------------- lifecycle
    def _run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True,
                              timeout=timeout, **self._user)

    def __enter__(self) -> PostgresServer:
        self.bindir = find_bindir()
        if self.bindir is None:
            raise PostgresMissing(f"PostgreSQL is not installed (no initdb/pg_ctl): {INSTALL_HINT}")
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise PostgresMissing("the PostgreSQL driver is missing: pip install 'psycopg[binary]' "
                                  "(`make setup` installs it with the project's `team` extra)") from e
        self.root = Path(tempfile.mkdtemp(prefix="evotrainer-pg-"))
        if os.geteuid() == 0:  # postgres will not run as root: run it as the unprivileged 'postgres' system user
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as e:
                self._cleanup_dir()
                raise PostgresMissing("running as root and there is no 'postgres' user to run the server as; "
                                      f"{INSTALL_HINT} (it creates the user)") from e
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": str(self.root)}
        data = self.root / "data"
        r = self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale",
                      "--no-sync")
        if r.returncode != 0:
            self._cleanup_dir()
            raise RuntimeError(f"initdb failed ({r.returncode}): {r.stderr[-2000:]}")
        for _attempt in range(3):  # a free port can be taken between choosing it and binding it
            self.port = _free_port()
            opts = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off "
                    "-c full_page_writes=off -c max_connections=60")
            r = self._run("pg_ctl", "-D", str(data), "-o", opts, "-l", str(self.root / "server.log"), "-w",
                          "-t", str(int(self.start_timeout_s)), "start", timeout=self.start_timeout_s + 30)
            if r.returncode == 0:
                return self
        log = (self.root / "server.log").read_text(errors="replace")[-2000:] if (self.root / "server.log").exists() else ""
        self.__exit__(None, None, None)
        raise RuntimeError(f"postgres did not start: {r.stderr[-1000:]} {log}")

    def postmaster_pid(self) -> int | None:
        pidfile = self.root / "data" / "postmaster.pid" if self.root else None
        try:
            return int(pidfile.read_text().split()[0]) if pidfile else None
        except (OSError, ValueError, IndexError):
            return None

    def __exit__(self, *exc: object) -> None:
        if self.root is None:
            return
        pid = self.postmaster_pid()
        if pid is not None:
            r = self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "-t", "30", "stop", timeout=60)
            if r.returncode != 0:
                try:
                    os.kill(pid, signal.SIGQUIT)  # immediate shutdown of the postmaster and its children
                    time.sleep(1)
                except ProcessLookupError:
                    pass
        self._cleanup_dir()

    def _cleanup_dir(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
