"""MLflow conventions: one experiment per home, one MLflow run per job, TRL metric names as keys.

Why the client API instead of ``mlflow.start_run``: jobs resume and fork, campaigns nest runs, and a
process may talk to several runs; the fluent API's global "active run" makes that fragile. The tracking
URI defaults to SQLite under the home (``sqlite:///HOME/mlflow.db``, artifacts in ``HOME/mlartifacts``);
set ``EVOTRAINER_MLFLOW_URI`` to use a tracking server instead.

MLflow keys may not contain ``@``, so pass@k is logged as ``eval/pass_at_<k>``.

Per-step metrics are buffered and written in one ``log_batch`` every ``FLUSH_EVERY`` steps: a SQLite
commit per step cost ~25 ms, 20 steps in one batch ~100 ms in all. (MLflow's own asynchronous queue
moved the cost to a thread but added ~0.5 s of queue teardown to every run's end.) The buffer is also
drained at every checkpoint and when a run ends, so after a ``kill -9`` MLflow lacks at most the steps
after the last checkpoint — exactly the steps a resumed job trains and logs again. ``metrics.jsonl`` in
the run directory stays the synchronous source of truth either way.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path
from typing import Any

from evotrainer.core.errors import ConfigError
from evotrainer.core.redact import mask

EXPERIMENT = "evotrainer"
FLUSH_EVERY = 10  # buffered steps per MLflow write
# A tracking server that does not answer fails fast: MLflow's defaults (7 retries with backoff, 120 s per request)
# held a command ~250 s before its error. Set either variable to override.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
_BAD_KEY = re.compile(r"[^0-9A-Za-z_\-. :/]")


def tracking_uri(home: Path) -> str:
    """``$EVOTRAINER_MLFLOW_URI``, else SQLite under ``home``; whoever asks then talks to it with bounded retries."""
    for k, v in HTTP_DEFAULTS.items():
        os.environ.setdefault(k, v)
    return os.environ.get("EVOTRAINER_MLFLOW_URI") or f"sqlite:///{home / 'mlflow.db'}"


def _create_sqlite_db(uri: str) -> None:
    """Create a new SQLite MLflow database whole or not at all.

    MLflow migrates a new database through ~60 Alembic revisions (seconds, and not transactional); a ``kill -9``
    in between left a home whose every later command failed with "Detected out-of-date database schema" (found by
    ``bench/soak.py``, a plain ``train`` killed during its first seconds). So the tables are built in a private
    file and linked into place only when complete; ``os.link`` refuses an existing name, so a process that lost a
    race to create it keeps the winner's database and drops its own."""
    path = Path(uri[len("sqlite:///"):])
    if path.exists() or not path.name:
        return
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.init-*"):  # left by a creator that was killed
        # the private file and SQLite's companions of it (a kill mid-transaction leaves "-journal")
        m = re.fullmatch(rf"\.{re.escape(path.name)}\.init-(\d+)(-journal|-wal|-shm)?", stale.name)
        if m and not Path(f"/proc/{m[1]}").exists():
            stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: a rename, which a racing creator could overwrite
        if not path.exists():
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def metric_key(name: str) -> str:
    return _BAD_KEY.sub("_", name.replace("@", "_at_"))


def _points(step: int, items) -> list[Any]:
    """MLflow metric points at ``step`` for the finite numbers among (name, value) ``items`` (names mapped by
    ``metric_key``); a bool, a None or a NaN is never sent."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(metric_key(k), float(v), now, int(step)) for k, v in items
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]


class Tracker:
    """A thin, explicit wrapper over ``MlflowClient`` bound to one home."""

    def __init__(self, home: Path):
        os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
        import logging

        from mlflow.tracking import MlflowClient

        for noisy in ("mlflow", "alembic"):  # schema-migration chatter on every new home (after mlflow's own setup)
            logging.getLogger(noisy).setLevel(logging.WARNING)

        self.home = home
        self._buffer: dict[str, list[Any]] = {}  # run id -> Metric rows not yet written (buffered=True)
        self.uri = tracking_uri(home)
        if self.uri.startswith("sqlite:///"):
            _create_sqlite_db(self.uri)
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            exp = self.client.get_experiment_by_name(EXPERIMENT)
        except Exception as exc:  # noqa: BLE001 - an unreachable or malformed tracking URI: one line, credentials masked
            if self.uri.startswith("sqlite:///"):
                raise

            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"cannot reach the MLflow tracking server {mask(self.uri)} ($EVOTRAINER_MLFLOW_URI): "
                              f"{mask(first)}; start it, fix the URI, or unset it for HOME's mlflow.db") from None
        if exp is None:
            art = (home / "mlartifacts").resolve().as_uri() if self.uri.startswith("sqlite") else None
            try:
                self.experiment_id = self.client.create_experiment(EXPERIMENT, artifact_location=art)
            except Exception:  # noqa: BLE001 - created concurrently by another process
                self.experiment_id = self.client.get_experiment_by_name(EXPERIMENT).experiment_id
        else:
            self.experiment_id = exp.experiment_id

    def create_run(self, name: str, tags: dict[str, str], params: dict[str, Any] | None = None) -> str:
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        if params:
            from mlflow.entities import Param

            items = [Param(k[:250], str(v)[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):
                self.client.log_batch(run.info.run_id, params=items[i : i + 100])
        return run.info.run_id

    def log_metrics(self, run_id: str, step: int, metrics: dict[str, float], buffered: bool = False) -> None:
        """Log one step's metrics; ``buffered=True`` holds them until ``FLUSH_EVERY`` steps are waiting or
        ``flush`` is called (at checkpoints and when the run ends)."""
        batch = _points(step, metrics.items())
        if not buffered:
            self._write(run_id, batch)
            return
        buf = self._buffer.setdefault(run_id, [])
        buf.extend(batch)
        if len({m.step for m in buf}) >= FLUSH_EVERY:
            self.flush(run_id)

    def _write(self, run_id: str, batch: list[Any]) -> None:
        for i in range(0, len(batch), 500):  # MLflow accepts at most 1000 metrics per batch
            self.client.log_batch(run_id, metrics=batch[i : i + 500])

    def flush(self, run_id: str | None = None) -> None:
        """Write the buffered metrics of ``run_id`` (of every run when None)."""
        for rid in [run_id] if run_id is not None else list(self._buffer):
            batch = self._buffer.pop(rid, [])
            if batch:
                self._write(rid, batch)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(run_id, k, str(v))

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def max_step(self, run_id: str, key: str) -> int:
        """Last step logged for ``key`` (-1 if none): resumed jobs skip steps MLflow already has."""
        self.flush(run_id)
        hist = self.client.get_metric_history(run_id, metric_key(key))
        return max((m.step for m in hist), default=-1)

    def backfill(self, run_id: str, metrics: Any, upto: int) -> int:
        """Log the rows of ``metrics`` (a ``read_metrics`` frame) at steps ``<= upto`` that MLflow lacks, key by
        key; returns how many values were written.

        A checkpoint counts as complete once the trainer has written it, which is before the checkpoint
        callback flushes the buffered steps to MLflow; a job killed in between resumes after that checkpoint,
        and without this those steps (still in ``metrics.jsonl``) would never reach MLflow.
        """
        batch = []
        for col in (c for c in metrics.columns if c != "step"):
            have = self.max_step(run_id, col)
            rows = metrics.loc[(metrics["step"] > have) & (metrics["step"] <= upto), ["step", col]].dropna()
            for st, v in rows.itertuples(index=False):
                batch += _points(st, [(col, v)])
        self._write(run_id, batch)
        return len(batch)

    def end_run(self, run_id: str, status: str) -> None:
        try:
            self.flush(run_id)
        finally:
            self.client.set_terminated(run_id, status=status)

    def reopen(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")
