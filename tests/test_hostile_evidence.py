"""Hostile evidence directories (issue 60: D3-D6, D10-D12): every read bounded, nothing silently wrong.

Real files of the kinds an attacker would leave: a ``metrics.jsonl`` that links to ``/dev/zero``, FIFOs, integers too
large for a step, Parquet columns of the wrong type; read through the real ``evotrainer`` CLI and the dashboard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from evotrainer.evidence.readers import load_evidence, read_job_dir
from tests.conftest import REPO


def _cli(args: list[str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _ours(root: Path, name: str = "run") -> Path:
    run = root / name
    (run / "rollouts").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"name": name, "status": "finished"}))
    return run


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_a_metrics_file_that_is_no_regular_file_is_unreadable_not_empty(tmp_path, kind):
    """D3: /dev/zero behind a link grew diagnose to 3.4 GB; a FIFO hung it for good. Both are named unreadable,
    at once, and diagnose fails with the file in the message."""
    run = _ours(tmp_path)
    if kind == "dev_zero":
        (run / "metrics.jsonl").symlink_to("/dev/zero")
    else:
        os.mkfifo(run / "metrics.jsonl")
    t0 = time.monotonic()
    ev = read_job_dir(run)
    assert time.monotonic() - t0 < 5
    why = {"dev_zero": "a character device", "fifo": "a FIFO"}[kind]
    assert ev.meta["unreadable"] == [str(run / "metrics.jsonl")]
    assert any(e.startswith(str(run / "metrics.jsonl") + ": " + why) for e in ev.meta["skipped"]), ev.meta
    r = _cli(["diagnose", str(run), "--json"], tmp_path / "home")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert "metrics.jsonl" in json.dumps(doc) and why in json.dumps(doc), doc


def test_watch_reads_a_fifo_without_hanging_and_keeps_its_timeout(tmp_path):
    """D3 and D4: watch on a FIFO ends at its timeout, and the timeout holds with an interval much longer than it."""
    run = _ours(tmp_path)
    os.mkfifo(run / "metrics.jsonl")
    t0 = time.monotonic()
    r = _cli(["watch", str(run), "--timeout", "3", "--interval", "100"], tmp_path / "home", timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 0 and took < 30, (took, r.stderr[-500:])
    assert "could not read" in r.stderr and "a FIFO" in r.stderr
    for bad in ("inf", "nan"):
        r = _cli(["watch", str(run), "--interval", bad, "--json"], tmp_path / "home")
        assert r.returncode == 2 and json.loads(r.stdout)["error"], r.stdout


def test_a_verl_dir_of_links_to_dev_zero_is_unreadable(tmp_path):
    run = tmp_path / "verl"
    (run / "rollout").mkdir(parents=True)
    (run / "rollout" / "1.jsonl").symlink_to("/dev/zero")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}}) + "\n")
    ev = load_evidence(str(run), None)
    assert any("1.jsonl: a character device" in e for e in ev.meta["skipped"]), ev.meta


def test_an_evidence_file_over_the_cap_is_named_with_the_cap(tmp_path, monkeypatch):
    run = _ours(tmp_path)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n" + " " * (2 << 20) + "\n")
    monkeypatch.setenv("EVOTRAINER_MAX_FILE_MB", "1")
    ev = read_job_dir(run)
    assert any("over the 1 MiB one evidence file may have" in e and "EVOTRAINER_MAX_FILE_MB" in e
               for e in ev.meta["skipped"]), ev.meta
    monkeypatch.setenv("EVOTRAINER_MAX_FILE_MB", "lots")
    from evotrainer.core.errors import ConfigError

    with pytest.raises(ConfigError, match="EVOTRAINER_MAX_FILE_MB is 'lots': set a positive whole number"):
        read_job_dir(run)


def test_a_step_too_large_for_int64_is_no_step(tmp_path):
    """D6: a trainer_state.json step of 4e25 (written as an integer) was shown as -9223372036854775808."""
    run = tmp_path / "trl"
    run.mkdir()
    history = [{"step": 1, "loss": 0.1, "reward": 0.2}, {"step": 4 * 10**25, "loss": 0.1, "reward": 0.3}]
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    ev = load_evidence(str(run), None)
    assert ev.metrics["step"].tolist() == [1]
    assert ev.metrics["step"].min() >= 0


def test_rollout_parquet_of_the_wrong_types_is_unreadable_not_rows_at_step_minus_one(tmp_path):
    """D6: string steps and numeric completions gave a critical length_collapse at step -1."""
    run = tmp_path / "trl"
    (run / "completions").mkdir(parents=True)
    pd.DataFrame({"step": ["a", "b"], "prompt": [1, 2], "completion": [3.0, 4.0]}).to_parquet(
        run / "completions" / "completions_00001.parquet")
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": [{"step": 1, "loss": 0.1}]}))
    ev = load_evidence(str(run), None)
    assert len(ev.rollouts) == 0
    assert any("completions_00001.parquet: column step holds" in e and "not whole numbers" in e
               for e in ev.meta["skipped"]), ev.meta
    r = _cli(["diagnose", str(run), "--json"], tmp_path / "home")
    assert "length_collapse" not in r.stdout or '"step": -1' not in r.stdout


def test_all_non_finite_entropy_is_not_enough_evidence_and_no_traceback_is_output():
    """D5: entropy_collapse and entropy_blowup crashed on all-NaN/inf entropy, with a traceback in the examples."""
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.evidence.model import Evidence

    n = 30
    m = pd.DataFrame({"step": range(1, n + 1), "entropy": [float("nan")] * 10 + [float("inf")] * 10
                      + [-float("inf")] * 10, "kl": [float("nan")] * n, "reward": [0.1] * n})
    ev = Evidence(metrics=m, rollouts=pd.DataFrame(), source="test")
    reg = Registry(HarnessSpec())
    for name in ("entropy_collapse", "entropy_blowup", "kl_blowup"):
        if name not in reg.names():
            continue
        (f,) = reg.get(name).run(ev)
        assert f.symptom != "diagnostic_error" and "not enough evidence" in f.explanation, f
    boom = reg.get("entropy_collapse")
    boom.analyze = lambda ev: 1 / 0  # type: ignore[method-assign]
    (f,) = boom.run(Evidence(metrics=pd.DataFrame({"step": range(1, n + 1), "entropy": [1.0] * n}),
                             rollouts=pd.DataFrame(), source="test"))
    assert f.symptom == "diagnostic_error" and "ZeroDivisionError" in f.explanation and f.examples == []
    assert "Traceback" not in f.model_dump_json()


# ---------------------------------------------------------------------------------------------- the dashboard
def _dashboard(home: Path):
    from fastapi.testclient import TestClient

    from evotrainer.ui import create_app

    return TestClient(create_app(home, "t" * 32), base_url="http://127.0.0.1:8765", follow_redirects=False)


def test_the_diagnose_page_answers_hostile_job_dirs_without_a_500_and_serves_nothing_outside(tmp_path):
    """D10: an empty job dir, garbage or list meta.json, a TRL output dir and a symlink answered 500 (Jinja's
    UndefinedError) without the CSP header; D12: a symlink to a directory outside the home was served; D11: a
    /dev/zero metrics file grew the dashboard by gigabytes."""
    home = tmp_path / "home"
    jobs = home / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "empty").mkdir()
    (jobs / "garbage").mkdir()
    (jobs / "garbage" / "meta.json").write_bytes(b"\xff{not json")
    (jobs / "listmeta").mkdir()
    (jobs / "listmeta" / "meta.json").write_text("[1, 2, 3]")
    trl = jobs / "trl"
    (trl / "completions").mkdir(parents=True)
    (trl / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": [{"step": 1, "loss": 0.1}]}))
    zero = _ours(jobs, "zero")
    (zero / "metrics.jsonl").symlink_to("/dev/zero")
    outside = _ours(tmp_path, "outside")
    (outside / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5, "secret": 42}) + "\n")
    (jobs / "link").symlink_to(outside)
    c = _dashboard(home)
    assert c.get("/?token=" + "t" * 32).status_code == 303
    for name in ("empty", "garbage", "listmeta", "trl", "zero"):
        r = c.get(f"/diagnose/{name}")
        assert r.status_code == 200, (name, r.status_code, r.text[:300])
        assert "Content-Security-Policy" in r.headers and r.headers["X-Content-Type-Options"] == "nosniff"
    r = c.get("/diagnose/link")
    assert r.status_code == 404 and "secret" not in r.text and "a link to a directory elsewhere" in r.text
    assert "/diagnose/link" not in c.get("/diagnose").text


def test_a_page_that_fails_still_has_the_security_headers(tmp_path, monkeypatch):
    from evotrainer.ui.views import Views

    home = tmp_path / "home"
    _ours(home / "jobs", "run")
    monkeypatch.setattr(Views, "diagnose", lambda self, name: 1 / 0)
    c = _dashboard(home)
    c.get("/?token=" + "t" * 32)
    r = c.get("/diagnose/run")
    assert r.status_code == 500 and "ZeroDivisionError" in r.text and "Traceback" not in r.text
    assert "Content-Security-Policy" in r.headers and r.headers["X-Content-Type-Options"] == "nosniff"


def test_rollouts_with_nullable_booleans_and_text_steps_are_read():
    """The type check reads the values: a 0/1 column with nulls (object dtype) and steps written as text digits
    are rollouts; only values of the wrong kind are refused."""
    from evotrainer.evidence.model import rollout_type_problem

    ok = pd.DataFrame({"step": ["1", "2"], "prompt": pd.Categorical(["a", "b"]), "completion": ["x", None],
                       "correct": [True, None], "reward": [0.5, float("nan")]})
    assert rollout_type_problem(ok) is None
    assert "column reward holds string" in rollout_type_problem(pd.DataFrame({"step": [1], "reward": ["high"]}))
    assert "column step holds" in rollout_type_problem(pd.DataFrame({"step": [1.5]}))
