"""A team deployment, run for real: the state store and LangGraph's checkpoints on a PostgreSQL server, the runs on
an MLflow tracking server, both started here on 127.0.0.1 (tests/postgres.py, tests/mlflow_server.py).

One job and one tiny campaign log to the tracking server over HTTP (the campaign's segments and branches nested
under its run); ``diagnose`` reads a run back from the server with an empty home; the campaign waits for a review
that another process approves through the shared store; nothing is written to the home's own databases. Missing
drivers and bad URLs fail with what to install or set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evotrainer.core.errors import ConfigError
from evotrainer.store import Store
from tests.conftest import REPO
from tests.mlflow_server import MlflowServer
from tests.test_campaign import _spec

TEAM_VARS = ("EVOTRAINER_STATE_URL", "EVOTRAINER_CHECKPOINT_URL", "EVOTRAINER_MLFLOW_URI")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    with MlflowServer(tmp_path_factory.mktemp("mlflow-server")) as srv:
        yield srv


def _env(home: Path, **team: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TEAM_VARS}
    return {**env, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1", **team}


def _cli(*args: str, env: dict[str, str], prelude: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """``evotrainer ARGS`` in a new process (``prelude``: Python run first, e.g. to make a driver unimportable)."""
    code = f"{prelude}\nimport sys\nfrom evotrainer.cli import main\nsys.argv = ['evotrainer', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _said(r: subprocess.CompletedProcess) -> str:
    """stderr with the console's line wrapping undone."""
    return " ".join(r.stderr.split())


def _own_databases(home: Path) -> list[str]:
    """The embedded databases a home gets when no URL is set (none of them may appear in a team deployment)."""
    return sorted(p.name for p in (home / "state.db", home / "checkpoints.db", home / "mlflow.db", home / "mlartifacts")
                  if p.exists())


# ---------------------------------------------------------------------------------------------- errors
NO_DRIVERS = "import sys\nsys.modules['psycopg'] = None\nsys.modules['langgraph.checkpoint.postgres'] = None"


def test_a_missing_driver_or_a_bad_url_says_what_to_install_or_set(tmp_path, monkeypatch):
    home = tmp_path / "home"
    # the state store's driver is not importable: the CLI exits 2 naming the package to install
    r = _cli("campaign", "status", "--json", prelude=NO_DRIVERS,
             env=_env(home, EVOTRAINER_STATE_URL="postgresql+psycopg://team:secret@127.0.0.1:5432/evotrainer"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "needs the database driver 'psycopg'" in _said(r) and "pip install 'psycopg[binary]'" in _said(r)
    assert "secret" not in r.stderr  # the password is never printed
    r = _cli("campaign", "status", env=_env(home, EVOTRAINER_STATE_URL="postgresql+psycopg://127.0.0.1:1/evotrainer"))
    assert r.returncode == 2 and "cannot reach the state store" in _said(r) and "Connection refused" in _said(r)
    r = _cli("campaign", "status", env=_env(home, EVOTRAINER_STATE_URL="team-db:5432"))
    assert r.returncode == 2 and "is not a database URL" in _said(r) and "postgresql+psycopg://" in _said(r)
    assert not home.exists() or _own_databases(home) == []  # nothing fell back to the embedded store

    # the checkpointer: refused rather than silently replaced by HOME/checkpoints.db
    from evotrainer.agent.checkpoints import checkpointer

    monkeypatch.setenv("EVOTRAINER_CHECKPOINT_URL", "sqlite:///shared/checkpoints.db")
    with pytest.raises(ConfigError, match="only a PostgreSQL URL is supported.*unset it"):
        checkpointer(tmp_path)
    monkeypatch.setenv("EVOTRAINER_CHECKPOINT_URL", "postgresql://team:secret@127.0.0.1:1/evotrainer")
    with pytest.raises(ConfigError, match="cannot reach the checkpoint database") as err:
        checkpointer(tmp_path)
    assert "secret" not in str(err.value)
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.postgres", None)
    with pytest.raises(ConfigError, match=r"not installed: pip install 'evotrainer\[team\]'.*langgraph-checkpoint-postgres"):
        checkpointer(tmp_path)
    assert not (tmp_path / "checkpoints.db").exists()


SETUP = """
import os, sys, time
from evotrainer.agent.checkpoints import postgres_saver
while not os.path.exists(sys.argv[2]): time.sleep(0.005)
saver = postgres_saver(sys.argv[1])
print(len(list(saver.list(None))))
"""


def test_checkpointers_that_start_together_on_a_new_database_create_its_tables_once(postgres, tmp_path):
    url = postgres.checkpoint_url(postgres.new_database())
    go = tmp_path / "go"
    ps = [subprocess.Popen([sys.executable, "-c", SETUP, url, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True) for _ in range(3)]
    time.sleep(2)  # all three imported and waiting: they set up together
    go.write_text("")
    outs = [p.communicate(timeout=180) for p in ps]
    assert [p.returncode for p in ps] == [0, 0, 0], [e[-1500:] for _o, e in outs]  # without the lock, 2 of 3 fail
    assert [o.strip() for o, _e in outs] == ["0", "0", "0"]  # each has a working saver on the (empty) tables


# ---------------------------------------------------------------------------------------------- a job
def test_a_job_logs_to_the_tracking_server_and_diagnose_reads_it_back(mlflow_server, tmp_path, tiny_harness):
    from mlflow.tracking import MlflowClient

    home = tmp_path / "home"
    env = _env(home, EVOTRAINER_MLFLOW_URI=mlflow_server.uri)
    r = _cli("train", "--task", "arith", "--harness", str(tiny_harness), "--steps", "2", "--policy", "nano",
             "--sft-steps", "0", "--eval-every", "0", "--save-every", "2", "--name", "on-server", "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    job = json.loads(r.stdout)
    run_id = job["run_id"]
    assert _own_databases(home) == []  # metrics and artifacts went to the server
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "on-server"
    assert sorted(m.step for m in client.get_metric_history(run_id, "reward")) == [1, 2]
    assert [a.path for a in client.list_artifacts(run_id, "rollouts")]  # uploaded through the server's proxy
    assert any((mlflow_server.root / "artifacts").rglob("*.parquet"))

    # a teammate with an empty home reads the run back from the server
    other = tmp_path / "elsewhere"
    d = _cli("diagnose", run_id, "--json", env=_env(other, EVOTRAINER_MLFLOW_URI=mlflow_server.uri))
    assert d.returncode == 0, d.stderr[-3000:]
    doc = json.loads(d.stdout)
    assert doc["evidence"]["source"] == "mlflow" and doc["evidence"]["steps"] == 2
    assert doc["evidence"]["rollouts"] == 2 * 4 * 4  # 2 steps of 4 prompts x 4 completions, from the artifacts
    assert _own_databases(other) == []

    missing = _cli("diagnose", "0" * 32, env=_env(other, EVOTRAINER_MLFLOW_URI=mlflow_server.uri))
    assert missing.returncode == 2 and f"no MLflow run '{'0' * 32}' in {mlflow_server.uri}" in _said(missing)
    down = _cli("diagnose", run_id, env={**_env(other, EVOTRAINER_MLFLOW_URI="http://127.0.0.1:1"),
                                         "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    assert down.returncode == 2 and "could not read MLflow run" in _said(down) and "127.0.0.1:1" in _said(down)


# ---------------------------------------------------------------------------------------------- a campaign
def test_a_campaign_on_postgresql_and_the_tracking_server_waits_for_a_review_from_another_process(
        postgres, mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient
    from sqlalchemy import create_engine, text

    db = postgres.new_database()
    home = tmp_path / "home"
    # the checkpointer gets the state store's own URL (SQLAlchemy form): one database, one URL to hand out
    env = _env(home, EVOTRAINER_STATE_URL=db, EVOTRAINER_CHECKPOINT_URL=db, EVOTRAINER_MLFLOW_URI=mlflow_server.uri)
    spec = _spec(tmp_path, autonomy="review", backtest={"max_proposals": 1, "looks": 1}, budget={"total_steps": 10})
    camp_proc = subprocess.Popen([sys.executable, "-m", "evotrainer.cli", "campaign", "start", str(spec), "--wait"],
                                 cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with Store(db) as store:  # this process reads the shared store while the campaign runs
            deadline = time.monotonic() + 400
            while not [c for c in store.list_campaigns() if c.status == "waiting_review"]:  # proposals stored first
                assert camp_proc.poll() is None, camp_proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the campaign never asked for a review"
                time.sleep(0.5)
            (pending,) = store.pending_reviews()
            (camp,) = store.list_campaigns()
            assert camp.owner.live and not store.list_backtests(camp.id)  # it waits, holding its lease
        approve = _cli("review", "approve", pending.id, "--comment", "go", "--reviewer", "ana", env=env)
        assert approve.returncode == 0, approve.stderr[-2000:]
        out, err = camp_proc.communicate(timeout=600)
    finally:
        if camp_proc.poll() is None:
            camp_proc.kill()
            camp_proc.wait()
    assert camp_proc.returncode == 0, err[-3000:]
    assert _own_databases(home) == []  # state, checkpoints and runs all went to the servers

    with Store(db) as store:
        (camp,) = store.list_campaigns()
        assert camp.status == "finished" and camp.owner is None
        review = store.get_review(pending.id)
        assert (review.verdict, review.reviewer, review.comment) == ("approve", "ana", "go")
        (bt,) = store.list_backtests(camp.id)
        assert bt.proposal_ids == [pending.id]
        assert sorted((b.role, b.seed) for b in store.list_branches(bt.id)) == sorted(
            [("control", s) for s in bt.seeds] + [("treatment", s) for s in bt.seeds])
        assert store.get_decision(pending.id) is not None
        spent = store.ledger_total(camp.id)
        assert 0 < spent <= 10
        assert len(store.policy_lineage(camp.id)) >= 2 and store.events(camp.id, kind="confirmation")
    engine = create_engine(db)
    try:
        with engine.connect() as conn:  # LangGraph's checkpoints are in the same PostgreSQL database
            n = conn.execute(text("SELECT count(*) FROM checkpoints WHERE thread_id = :t"), {"t": camp.thread_id}).scalar()
    finally:
        engine.dispose()
    assert n > 0

    # a teammate on another machine (an empty home, the same URLs) sees the campaign, its decisions and budget
    other = tmp_path / "teammate"
    team = {k: env[k] for k in TEAM_VARS}
    status = _cli("campaign", "status", camp.id, "--json", env=_env(other, **team))
    assert status.returncode == 0, status.stderr[-2000:]
    doc = json.loads(status.stdout)
    assert doc["campaign"]["status"] == "finished" and doc["budget"]["spent"] == spent
    assert [d["proposal_id"] for d in doc["decisions"]] == [pending.id]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent = client.get_run(camp.mlflow_run_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{camp.mlflow_run_id}'")
    # the average of the kept arm's seeds is a run too, on the server like the rest (when the campaign kept one)
    merged = any(k["merged"] for k in doc["kept"] if k.get("merged"))
    assert {r.data.tags["evotrainer.role"] for r in runs} == {"segment", "control", "treatment"} | (
        {"merged"} if merged else set())
    assert all(r.data.tags["evotrainer.campaign"] == camp.id for r in runs)
    assert all(r.data.tags["evotrainer.proposal"] == pending.id for r in runs if r.data.tags["evotrainer.role"] == "treatment")
