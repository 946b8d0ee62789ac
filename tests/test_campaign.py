"""Real campaigns, tiny: the whole loop with TRL jobs, the store, LangGraph's checkpointer and MLflow.

Every campaign here trains the nano policy on 1-digit arith with a harness whose completion limit is
too short (a real flaw the diagnostics find), 2-step segments and branches, 2 paired seeds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evotrainer.agent.campaign import start_campaign
from evotrainer.core import procs
from evotrainer.core.runmeta import read_run_meta
from evotrainer.store import Store
from tests.conftest import REPO

HARNESS = """
name: flawed
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 2}
data: {pool_size: 64, difficulty: [1, 1]}
"""


def _spec(tmp: Path, **over) -> Path:
    (tmp / "h.yaml").write_text(HARNESS)
    doc = {
        "name": "tiny", "task": "arith", "policy": {"size": "nano", "sft_steps": 150}, "harness": "h.yaml",
        "segment_steps": 2, "budget": {"total_steps": 12, "explore_share": 1.0, "final_share": 0.0}, "backtest": {"branch_steps": 2, "seeds": 2, "max_proposals": 2},
        "eval": {"every": 0, "n": 16, "k": 1}, "stop": {"plateau_rounds": 2}, "autonomy": "auto",
    }
    for k, v in over.items():
        doc[k] = {**doc[k], **v} if isinstance(v, dict) and isinstance(doc.get(k), dict) else v
    import yaml

    p = tmp / "campaign.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _cli(*args, home: Path, env: dict | None = None, **kw):
    e = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _only_campaign(home: Path):
    store = Store.for_home(home)
    (camp,) = store.list_campaigns()
    return store, camp


def test_auto_campaign_runs_end_to_end_within_budget(tmp_path):
    home = tmp_path / "home"
    logs: list[str] = []
    # one look: the backtest's whole cost is planned up front (with looks a look that does not fit stops it instead)
    cid = start_campaign(_spec(tmp_path, trace=True, backtest={"looks": 1}), home, log=logs.append)
    store = Store.for_home(home)
    camp = store.get_campaign(cid)
    assert camp.status == "finished"
    props = store.list_proposals(cid)
    assert props and all(p.brain == "heuristic" for p in props)
    r0 = [p for p in props if p.round == 0]
    assert {p.status for p in r0} >= {"skipped_budget"}  # two proposals, only one backtest fits the budget
    assert store.events(cid, kind="backtest_trimmed")
    tested = [p for p in r0 if p.status != "skipped_budget"]
    assert len(tested) == 1 and store.get_review(tested[0].id).reviewer == "auto"
    bt = store.list_backtests(cid)[0]
    branches = store.list_branches(bt.id)
    assert sorted((b.role, b.seed) for b in branches) == sorted(
        [("control", s) for s in bt.seeds] + [("treatment", s) for s in bt.seeds])
    (d,) = [x for x in store.list_decisions(cid) if x.proposal_id == tested[0].id]
    assert d.outcome in ("promote", "reject", "inconclusive", "blocked") and d.stats.n_pairs == 2
    spent = store.ledger_total(cid)
    assert spent <= 12
    assert spent == sum(e.steps for e in store.ledger(cid))
    assert len(store.policy_lineage(cid)) >= 2
    # round 0's segment evaluated its own start: how far it moved the policy is on record (agent/movement.py)
    (mv,) = [e.message for e in store.events(cid, kind="movement") if e.message["round"] == 0]
    assert mv["moved"] is not None and 0 <= mv["changed"] <= mv["n"] and mv["steps"] > 0
    # MLflow: branches are nested under the campaign's run and tagged.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("evotrainer")
    runs = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{camp.mlflow_run_id}'")
    roles = {r.data.tags["evotrainer.role"] for r in runs}
    merged = [e.message["merged"] for e in store.events(cid, kind="kept_branch") if e.message.get("merged")]
    assert roles == {"segment", "control", "treatment"} | ({"merged"} if merged else set())
    # a kept average is scored on the decision split (its run's own evaluation, its version's held-out accuracy)
    # exactly when a round follows the segment trained from it: that round's movement starts from it
    from evotrainer.training.evaluation import read_outcomes

    for e in store.events(cid, kind="kept_branch"):
        m = e.message.get("merged") or {}
        if m.get("kept"):
            pv = next(v for v in store.policy_lineage(cid) if v.run_name == m["run"])
            dec = read_outcomes(home / "jobs" / m["run"], m["step"])
            followed = any(x.message["round"] == e.message["round"] + 1 for x in store.events(cid, kind="movement"))
            assert (dec is not None) == followed and (pv.eval_accuracy is not None) == followed
            assert dec is None or sum(dec) / len(dec) == pytest.approx(pv.eval_accuracy)
    # trace: true -> the graph's nodes are traced into the same experiment (mlflow.langchain.autolog)
    traces = client.search_traces(locations=[exp.experiment_id])
    assert traces and any("train_segment" in {s.name for s in t.data.spans} for t in traces)
    treat = [r for r in runs if r.data.tags["evotrainer.role"] == "treatment"]
    assert all(r.data.tags["evotrainer.proposal"] == tested[0].id for r in treat)
    # campaign status reports lineage, budget and decisions with reasons
    from typer.testing import CliRunner

    from evotrainer.cli import app

    doc = json.loads(CliRunner().invoke(app, ["campaign", "status", cid, "--json", "--home", str(home)]).stdout)
    assert doc["budget"]["spent"] == spent and doc["decisions"][0]["reasons"]
    # ... and where its jobs' seconds went, from every job's recorded sessions
    js = doc["seconds"]
    assert js["untimed_jobs"] == 0 and js["sessions"] >= len({e.run_name for e in store.ledger(cid)})
    assert 0 < js["trainer"] < js["jobs"] and js["setup"] > 0 and js["eval"] >= 0
    # the first segment built the nano base (a fresh home): its SFT is counted apart from the sessions' setup
    runs = {e.run_name for e in store.ledger(cid)}
    warm = [t.warm_start_s for r in runs for t in read_run_meta(home / "jobs" / r).timings]
    assert js["warm_start"] > 0 and sum(1 for w in warm if w > 0) == 1
    assert abs(js["trainer"] + js["eval"] + js["setup"] + js["warm_start"] + js["other"] - js["jobs"]) < 0.5
    text = CliRunner().invoke(app, ["campaign", "status", cid, "--home", str(home)]).stdout
    assert f"job seconds {js['jobs']:.0f} s in {js['sessions']} job session(s)" in text
    assert f"warm start {js['warm_start']:.0f} s" in text
    # ... and where the campaign process's own seconds went, node by node (agent/clock.py)
    ps = doc["process_seconds"]
    assert {"open", "train_segment", "diagnose", "propose", "backtest", "distill", "finish"} <= set(ps["own"])
    assert ps["scoring"] > 0  # the final confirmation scores in the worker
    assert ps["jobs"] > 0 and ps["jobs"] + ps["scoring"] >= js["jobs"] - 0.5  # the waits cover every session
    assert abs(sum(ps["own"].values()) - ps["own_total"]) < 0.5
    assert f"campaign process {ps['own_total']:.0f} s of its own work" in text
    # finishing confirmed start and end once on fresh held-out problems; a second confirmation (CLI) agrees
    (ev,) = store.events(cid, kind="confirmation")
    c = ev.message
    assert c["n"] == 16 and c["seed"] == 1235 and c["mainline"] == camp.mainline_version == doc["campaign"]["mainline_version"]
    assert 0.0 <= c["start"] <= 1.0 and 0.0 <= c["end"] <= 1.0
    assert (c["start_at_end_budget"] is None) == (c["budgets"][0] == c["budgets"][1])
    assert doc["confirmation"] == c
    again = CliRunner().invoke(app, ["campaign", "confirm", cid, "--json", "--home", str(home)])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == c  # greedy decoding of the same checkpoints on the same problems
    assert c["gain_se"] is not None and 0.0 <= c["gain_se"] <= 0.5  # paired over the 16 problems
    wide = CliRunner().invoke(app, ["campaign", "confirm", cid, "--n", "40", "--json", "--home", str(home)])
    assert wide.exit_code == 0, wide.output
    assert json.loads(wide.stdout)["n"] == 40 and json.loads(wide.stdout)["gain_se"] is not None
    assert len(store.events(cid, kind="confirmation")) == 3
    bad = CliRunner().invoke(app, ["campaign", "confirm", cid, "--n", "0", "--home", str(home)])
    assert bad.exit_code != 0 and "give 1 or more" in bad.output
    assert len(store.events(cid, kind="confirmation")) == 3  # nothing recorded for the refused one
    # the skill library: proposals cite library skills; distill recorded the decision in the campaign's copy
    from evotrainer.library.curation import read_log
    from evotrainer.library.loader import Library

    lib_dir = home / "campaigns" / cid / "library"
    lib = Library.load(lib_dir)
    assert tested[0].cited_skills and all(lib.find(s) is not None for s in tested[0].cited_skills)
    if d.outcome != "failed":
        log = [e for e in read_log(lib_dir) if e.actor == f"campaign:{cid}"]
        assert log and any(tested[0].id in e.why for e in log)
        hist = CliRunner().invoke(app, ["skills", "history", tested[0].cited_skills[0], "--home", str(home),
                                        "--library", str(lib_dir), "--json"])
        assert hist.exit_code == 0 and tested[0].id in hist.stdout


def test_review_flow_across_processes_approve_and_reject(tmp_path):
    home = tmp_path / "home"
    spec = _spec(tmp_path, autonomy="review", budget={"total_steps": 14})
    camp_proc = _cli("campaign", "start", str(spec), "--wait", "--max-rounds", "1", home=home)
    deadline = time.time() + 400
    pending = []
    while time.time() < deadline and len(pending) < 2:
        assert camp_proc.poll() is None, camp_proc.communicate()[1][-3000:]
        if (home / "state.db").exists():
            q = _cli("review", "list", "--json", home=home)
            out, _ = q.communicate(timeout=120)
            pending = json.loads(out)["pending"] if q.returncode == 0 else []
        time.sleep(1)
    assert len(pending) == 2, "campaign never asked for review"
    store, camp = _only_campaign(home)
    assert camp.status == "waiting_review" and not store.list_backtests(camp.id)  # nothing ran before the review
    a = _cli("review", "approve", pending[0]["id"], "--comment", "looks right", "--reviewer", "ana", home=home)
    r = _cli("review", "reject", pending[1]["id"], "--comment", "not now", "--reviewer", "ana", home=home)
    assert a.wait(120) == 0 and r.wait(120) == 0
    out, err = camp_proc.communicate(timeout=600)
    assert camp_proc.returncode == 0, err[-3000:]
    store, camp = _only_campaign(home)
    rej = store.get_review(pending[1]["id"])
    assert (rej.verdict, rej.reviewer, rej.comment) == ("reject", "ana", "not now")
    assert store.get_proposal(pending[1]["id"]).status == "rejected"
    bt = store.list_backtests(camp.id)[0]
    assert bt.proposal_ids == [pending[0]["id"]]
    assert {b.proposal_id for b in store.list_branches(bt.id)} == {None, pending[0]["id"]}
    bad = _cli("review", "approve", pending[1]["id"], home=home)
    _, err = bad.communicate(timeout=120)
    assert bad.returncode == 2 and "not waiting for review" in err


def _wait_for(pred, proc, timeout=400):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    pytest.fail("condition not reached")


def _warm_base(home: Path) -> None:
    """Build the campaign's warm-started base now, so that no job of the campaign spends its timeout on it."""
    from evotrainer.tasks import get_task
    from evotrainer.training.policy import PolicySpec, base_policy_dir

    base_policy_dir(home, get_task("arith", {}), PolicySpec(size="nano", sft_steps=150), 0, (1, 1))


def test_crashed_hung_and_out_of_memory_branches_are_recorded_failed_and_the_campaign_goes_on(tmp_path):
    home = tmp_path / "home"
    _warm_base(home)
    # two local workers: a look's six branches run two at a time, and the faults fail only their own
    spec = _spec(tmp_path, backtest={"max_proposals": 1, "seeds": 3}, budget={"total_steps": 14},
                 launcher={"kind": "local", "workers": 2})
    meet = tmp_path / "meet"
    meet.mkdir()
    faults = {"EVOTRAINER_FAIL_RUNS": r"__treatment1__s10000$", "EVOTRAINER_HANG_RUNS": r"__treatment1__s10001$",
              "EVOTRAINER_OOM_RUNS": r"__treatment1__s10002$",
              # the first two controls can only start if they run side by side (jobs in one worker never meet)
              "EVOTRAINER_MEET_RUNS": r"__control__s1000[01]$", "EVOTRAINER_MEET_DIR": str(meet),
              "EVOTRAINER_JOB_TIMEOUT_S": "30"}  # far above a tiny job (it held with a bench beside it); the hung one waits it out
    p = _cli("campaign", "start", str(spec), "--json", home=home, env=faults)
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-3000:]
    assert json.loads(out)["campaign"]["status"] == "finished"
    store, camp = _only_campaign(home)
    assert camp.status == "finished"
    bt = {b.seed: b for b in store.list_branches(store.list_backtests(camp.id)[0].id) if b.role == "treatment"}
    assert {s: b.status for s, b in bt.items()} == {10000: "failed", 10001: "failed", 10002: "failed"}
    assert "worker process died" in bt[10000].error
    assert "timed out" in bt[10001].error and "30 s per-job timeout" in bt[10001].error
    assert bt[10002].error.startswith("out of memory: MemoryError")
    controls = [b for b in store.list_branches(store.list_backtests(camp.id)[0].id) if b.role == "control"]
    assert len(controls) == 3 and all(b.status == "finished" for b in controls)  # only the faulty branches failed
    met = {f.name.rsplit(".", 1)[0].rsplit("__", 1)[1] for f in meet.iterdir()}
    assert met == {"s10000", "s10001"}  # and the two controls did meet
    # the first backtest's proposal (steps it left unspent go to later rounds, which may backtest again)
    first = store.list_backtests(camp.id)[0].proposal_ids
    (d,) = [x for x in store.list_decisions(camp.id) if x.proposal_id in first]
    assert d.outcome == "failed" and "complete pair" in d.reasons[0]
    assert not [r for r in store.list_processes(camp.id) if procs.alive(r.pid, r.started)]  # no worker left behind
    # the branches side by side shared the cores, a segment (alone) had them all, and every session of a job computed
    # with the count its first one recorded (JobSpec.threads)
    from evotrainer.core.runmeta import read_run_meta

    cores, seen = os.cpu_count() or 1, set()
    for run in sorted((home / "jobs").iterdir()):
        meta = read_run_meta(run)
        if meta is None or not meta.timings:  # the crashed and the hung branch; the seeds' average (no training)
            continue
        want = cores if run.name.endswith("__segment") else max(1, cores // 2)
        assert meta.spec["threads"] == want and {t.threads for t in meta.timings} == {want}, (run.name, meta.timings)
        seen.add(run.name.rsplit("__", 2)[-2] if "__s1000" in run.name else "segment")
    assert {"segment", "control"} <= seen


def _alive(refs) -> list[int]:
    return [r.pid for r in refs if procs.alive(r.pid, r.started)]


def _gone_within(refs, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while _alive(refs) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(refs)


def test_kill_9_mid_segment_then_kill_only_the_owner_mid_branch_then_resume_without_duplicates(tmp_path):
    """Two ways a campaign dies: its whole process group (a closed terminal) mid segment, then only the owner
    (the OOM killer's choice, or `kill -9 PID`) while a branch trains. After the second, no worker of the
    campaign is left within 5 s, status says interrupted (with the resume command), a rollback works, and the
    resumed campaign has every ledger, branch, decision and metric row once."""
    from typer.testing import CliRunner

    from evotrainer.cli import app

    home = tmp_path / "home"
    spec = _spec(tmp_path, backtest={"max_proposals": 1}, budget={"total_steps": 11}, segment_steps=3)
    jobs = home / "jobs"

    p = _cli("campaign", "start", str(spec), home=home, start_new_session=True)
    _wait_for(lambda: any(jobs.glob("*__segment/metrics.jsonl")), p)  # mid segment: training has started
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    store, camp = _only_campaign(home)
    p = _cli("campaign", "resume", camp.id, home=home)  # no session of its own: only the owner is killed below
    _wait_for(lambda: any(jobs.glob("*__treatment*/meta.json")), p)  # mid backtest: a branch trains
    workers = store.list_processes(camp.id)
    assert _alive(workers), "the owner recorded no live worker"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert _gone_within(workers, 5.0) == []  # no process of the campaign is left

    cli = CliRunner()
    doc = json.loads(cli.invoke(app, ["campaign", "status", camp.id, "--json", "--home", str(home)]).stdout)
    assert doc["campaign"]["status"] == "interrupted" and doc["campaign"]["owner"]["pid"] == p.pid
    assert doc["resume"].startswith(f"evotrainer campaign resume {camp.id}")
    plain = cli.invoke(app, ["campaign", "status", camp.id, "--home", str(home)])
    assert "interrupted" in plain.stdout and f"evotrainer campaign resume {camp.id}" in plain.stdout
    listed = json.loads(cli.invoke(app, ["campaign", "status", "--json", "--home", str(home)]).stdout)
    assert [c["status"] for c in listed["campaigns"]] == ["interrupted"]
    first = store.policy_lineage(camp.id)[0].id
    rb = cli.invoke(app, ["campaign", "rollback", camp.id, first, "--home", str(home)])
    assert rb.exit_code == 0, rb.output
    assert store.get_campaign(camp.id).status == "interrupted" and store.events(camp.id, kind="rollback")

    q = _cli("campaign", "resume", camp.id, "--json", home=home)
    out, err = q.communicate(timeout=600)
    assert q.returncode == 0, err[-3000:]
    assert json.loads(out)["campaign"]["status"] == "finished"
    store, camp = _only_campaign(home)
    assert camp.status == "finished"
    assert [e.message["previous"]["pid"] for e in store.events(camp.id, kind="owner_takeover")][-1] == p.pid
    assert len(store.list_proposals(camp.id, round=0)) == 1 and len(store.list_decisions(camp.id)) == 1
    branches = store.list_branches(store.list_backtests(camp.id)[0].id)
    assert len(branches) == 4 and len({(b.proposal_id, b.role, b.seed) for b in branches}) == 4
    # the mainline went on from the adopted arm, chosen once on the selection split: from the average of its two
    # seeds unless that scored below both, else from the better seed
    (kept,) = [e.message for e in store.events(camp.id, kind="kept_branch")]
    best = max(kept["candidates"], key=lambda c: (c["selection_accuracy"], c["decision_accuracy"], -c["seed"]))
    assert kept["split"] == "selection" and len(kept["candidates"]) == 2
    merged = kept["merged"]
    assert merged["from"] == [c["run"] for c in kept["candidates"]] and merged["step"] == best["step"]
    assert merged["kept"] == (merged["selection_accuracy"] >= min(c["selection_accuracy"] for c in kept["candidates"]))
    chosen = merged if merged["kept"] else best
    assert kept["chosen"] == chosen["run"]
    pv = next(v for v in store.policy_lineage(camp.id) if v.run_name == kept["chosen"])
    assert pv.checkpoint.endswith(f"checkpoint-{best['step']}") and pv.selection_accuracy == chosen["selection_accuracy"]
    assert len([d for d in jobs.iterdir() if d.name.endswith("__merged")]) == 1  # made once, across the kill
    if merged["kept"]:
        # its decision split is scored, as its own record, only when a round after the segment that trains from it
        # reads it (that segment's movement starts from it); a segment that trains the rest of the budget has none
        from evotrainer.training.evaluation import read_outcomes

        dec = read_outcomes(jobs / merged["run"], merged["step"])
        after = jobs / f"{camp.id}__r01__segment" / "meta.json"
        if not after.exists() or json.loads(after.read_text())["spec"]["steps"] > 3:
            assert dec is None and pv.eval_accuracy is None
        else:
            assert dec is not None and sum(dec) / len(dec) == pytest.approx(pv.eval_accuracy)
    said = " ".join(cli.invoke(app, ["campaign", "status", camp.id, "--home", str(home)]).stdout.split())
    assert ("the average of the 2 " in said) == merged["kept"] and ("below every seed" in said) != merged["kept"]
    led = store.ledger(camp.id)
    assert len({e.key for e in led}) == len(led) and store.ledger_total(camp.id) <= 11
    from mlflow.tracking import MlflowClient

    from evotrainer.evidence.model import read_metrics

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    # the campaign's run plots the mainline's accuracy for the rounds that scored it, and no NaN for one that did not
    import math

    plotted = client.get_metric_history(camp.mlflow_run_id, "campaign/mainline_accuracy")
    rounds = {m.step for m in client.get_metric_history(camp.mlflow_run_id, "campaign/budget_spent")}
    assert rounds and all(math.isfinite(m.value) for m in plotted) and {m.step for m in plotted} <= rounds
    by_run: dict[str, int] = {}
    for e in led:  # a branch is trained one look at a time: one ledger entry per leg (run@step)
        assert e.key == e.run_name or e.key.startswith(f"{e.run_name}@"), e.key
        by_run[e.run_name] = by_run.get(e.run_name, 0) + e.steps
    for run, spent in by_run.items():  # every run's steps were trained once: ledger = metrics.jsonl = MLflow
        m = read_metrics(jobs / run)
        steps = list(m.loc[m["loss"].notna(), "step"]) if "loss" in m else []
        assert spent == len(steps) == len(set(steps)), run
        run_id = json.loads((jobs / run / "meta.json").read_text())["run_id"]
        assert sorted(x.step for x in client.get_metric_history(run_id, "loss")) == sorted(set(steps)), run


def test_two_resumes_at_once_one_runs_the_other_exits_2_then_stop_and_stop_now(tmp_path):
    from evotrainer.agent.campaign import create_campaign

    home = tmp_path / "home"
    cid = create_campaign(_spec(tmp_path), home)
    a, b = (_cli("campaign", "resume", cid, home=home) for _ in range(2))
    deadline = time.time() + 120
    while a.poll() is None and b.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    loser, winner = (a, b) if a.poll() is not None else (b, a)
    _, err = loser.communicate(timeout=60)
    assert loser.returncode == 2, err[-3000:]
    assert f"owner pid {winner.pid}" in err and f"evotrainer campaign stop {cid}" in err
    assert winner.poll() is None
    store = Store.for_home(home)
    _wait_for(lambda: bool(store.list_processes(cid)), winner)
    workers = store.list_processes(cid)

    stop = _cli("campaign", "stop", cid, "--json", home=home)
    out, err = stop.communicate(timeout=120)
    assert stop.returncode == 0, err
    doc = json.loads(out)
    assert (doc["signal"], doc["exited"], doc["owner"]["pid"]) == ("SIGTERM", True, winner.pid)
    assert winner.wait(timeout=30) == 0  # it stopped cleanly: abandoned its job, recorded 'stopped', exited
    assert store.get_campaign(cid).status == "stopped" and store.get_campaign(cid).owner is None
    assert _gone_within(workers, 5.0) == []

    again = _cli("campaign", "resume", cid, home=home)
    _wait_for(lambda: bool(store.list_processes(cid)), again)
    workers = store.list_processes(cid)
    now = _cli("campaign", "stop", cid, "--now", "--json", home=home)
    out, err = now.communicate(timeout=120)
    assert now.returncode == 0, err
    doc = json.loads(out)
    assert doc["signal"] == "SIGKILL" and again.pid in doc["ended"]
    assert again.wait(timeout=30) == -signal.SIGKILL
    assert _gone_within(workers, 5.0) == []
    assert store.get_campaign(cid).status == "stopped"


def test_llm_brain_drives_a_campaign_round_through_the_openai_client(tmp_path):
    """A campaign whose brain is an OpenAI-compatible endpoint (the scripted server on 127.0.0.1)."""
    from tests.llm_server import ScriptedLLM

    reply = json.dumps({"proposals": [{
        "knob": "grpo.max_completion_length", "value": 4,
        "hypothesis": {"symptom": "truncation", "cause": "answers plus EOS need 3 tokens",
                       "change": "allow 4 completion tokens", "expected_effect": "fewer truncated answers"},
        "rationale": "the truncation finding", "cited_skills": ["longer-completions"]}]})
    home = tmp_path / "home"
    with ScriptedLLM([reply]) as llm:
        spec = _spec(tmp_path, backtest={"max_proposals": 1}, budget={"total_steps": 10},
                     brain={"kind": "llm", "llm": {"base_url": llm.base_url, "model": "scripted",
                                                    "api_key_env": "EVOTRAINER_TEST_KEY"}})
        cid = start_campaign(spec, home, log=lambda _m: None)
        assert len(llm.requests) >= 1
        assert "grpo.max_completion_length" in llm.requests[0]["messages"][-1]["content"]
    store = Store.for_home(home)
    (p,) = store.list_proposals(cid, round=0)
    assert (p.brain, p.knob, p.old, p.new) == ("llm", "grpo.max_completion_length", 2, 4)
    assert p.cited_skills == ["longer-completions"]
    assert store.get_decision(p.id) is not None


NULL_SKILL = """---
name: A weight decay too small to matter
description: Set AdamW's weight decay to 1e-12, which float32 parameters cannot feel (a change with no effect).
kind: skill
triggers:
- symptom: truncation
intervention:
  knob: optim.weight_decay
  op: set
  arg: 1.0e-12
  available: true
evidence: []
counters:
  helpful: 0
  harmful: 0
  uses: 0
status: active
version: 1
sources:
- title: Test fixture
---
# A weight decay too small to matter

## When to use
- Never; a test fixture.

## Why it works
It does not: p * (1 - lr * 1e-12) rounds to p in float32.

## How to apply
Set `optim.weight_decay` to 1e-12.

## When not to
- Always.
"""


def test_a_backtest_of_a_change_with_no_effect_stops_at_the_first_look_and_the_mainline_gets_the_steps(tmp_path):
    """A real change with exactly no effect (common random numbers make both arms the same run): the first look
    rejects it for futility, its branches stop there, and the steps they did not spend stay in the budget: the next
    segment is an ordinary one, and the campaign still spends its whole budget."""
    lib = tmp_path / "lib" / "tiny-decay"
    lib.mkdir(parents=True)
    (lib / "SKILL.md").write_text(NULL_SKILL)
    home = tmp_path / "home"
    spec = _spec(tmp_path, library=str(tmp_path / "lib"), backtest={"looks": 2, "max_proposals": 1, "min_effect": 0.01})
    cid = start_campaign(spec, home, log=lambda m: None)
    store = Store.for_home(home)
    (d,) = store.list_decisions(cid)
    assert d.outcome == "reject" and d.reasons[-1].startswith("futility") and "stopped early" in d.reasons[-1]
    assert (d.stats.look, d.stats.looks, d.stats.effect, d.stats.ci_high) == (1, 2, 0.0, 0.0)
    branches = store.list_branches(store.list_backtests(cid)[0].id)
    assert len(branches) == 4 and all(len(b.looks) == 1 and b.steps == 1 for b in branches)
    # 2 arms × 2 seeds × 1 step of the 2 planned: 4 steps not spent, left to later rounds
    meta = json.loads((home / "jobs" / f"{cid}__r01__segment" / "meta.json").read_text())
    assert meta["spec"]["steps"] == 2
    assert store.ledger_total(cid) == 12
    summary = json.loads(subprocess.run([sys.executable, "-m", "evotrainer.cli", "campaign", "status", cid, "--json",
                                         "--home", str(home)], capture_output=True, text=True, cwd=REPO).stdout)
    sp = summary["spend"]
    assert sp["spent"] == 12 and sp["mainline_segments"] + sp["kept_branches"] + sp["discarded"] == 12
    # the control arm was adopted: its two 1-step seeds, or the one kept when their average scored below both
    (kept,) = [e.message for e in store.events(cid, kind="kept_branch")]
    k = 2 if kept["merged"]["kept"] else 1
    assert sp["kept_branches"] == k and sp["useful_share"] == pytest.approx((2 + k + 6) / 12, abs=1e-4)


def test_no_backtest_starts_in_the_final_share_and_the_last_segment_trains_the_rest(tmp_path):
    """budget.final_share keeps the end of the budget for the mainline: round 0's backtest would leave 6 of 12 steps
    after its first look, under 0.6 × 12, so it is skipped with that reason, and the next segment, after which no
    look could start either, trains all 10 remaining steps: every step spent is in the final policy's lineage."""
    home = tmp_path / "home"
    logs: list[str] = []
    cid = start_campaign(_spec(tmp_path, budget={"final_share": 0.6}, backtest={"looks": 2, "max_proposals": 1}), home,
                         log=logs.append)
    store = Store.for_home(home)
    assert store.list_backtests(cid) == [] and store.ledger_total(cid) == 12
    assert any("backtest skipped: after its first look (4 steps) 6 would remain, under budget.final_share 0.6" in m
               for m in logs), logs
    meta = json.loads((home / "jobs" / f"{cid}__r01__segment" / "meta.json").read_text())
    assert meta["spec"]["steps"] == 10
    assert any("the last segment trained the remaining 10 steps" in m for m in logs), logs
    # budget.final_checks 4: it saved and scored versions every 3 of its steps on the way (5, 8, 11) before its end,
    # in one chain from round 0's segment, and the mainline is its end or the best of them (mainline._keep_best)
    assert meta["spec"]["eval"]["every"] == 3
    by_id = {v.id: v for v in store.policy_lineage(cid)}
    end = by_id[f"{cid}:r01:segment"]
    chain, v = [], end
    while v.parent_id in by_id and v.parent_id.startswith(end.id):
        v = by_id[v.parent_id]
        chain.append(v)
    assert [c.step for c in chain] == [11, 8, 5] and v.parent_id == f"{cid}:r00:segment"
    assert all(c.selection_accuracy is not None and c.checkpoint.endswith(f"checkpoint-{c.step}") for c in [end, *chain])
    camp = store.get_campaign(cid)
    kept = store.get_policy_version(camp.mainline_version)
    assert kept.id in {end.id, *(c.id for c in chain), *(e.message["to"] for e in store.events(cid, kind="regression_rollback"))}
    assert kept.id == end.id or kept.selection_accuracy > end.selection_accuracy


def test_the_same_campaign_spec_and_seed_make_the_same_decisions(tmp_path):
    """Run-to-run differences would make a paired backtest unauditable: two homes, one spec and seed, the same
    proposals, values, looks, decisions, kept branches, ledger and held-out numbers (wall clock and ids aside).

    The second campaign rebuilds every look from its checkpoint (``launcher.live_sessions: 0``), the first goes on in
    live branch sessions (the default, jobs/live.py): that must change nothing either."""
    def run(sub: str, **over) -> dict:
        d = tmp_path / sub
        d.mkdir()
        cid = start_campaign(_spec(d, **over), d / "home", log=lambda m: None)
        store = Store.for_home(d / "home")
        strip = lambda s: s.replace(cid, "C")  # noqa: E731
        return {
            "proposals": [(strip(p.id), p.knob, p.new, p.status) for p in store.list_proposals(cid)],
            "decisions": [(strip(x.proposal_id), x.outcome, x.stats.model_dump() if x.stats else None)
                          for x in store.list_decisions(cid)],
            "ledger": sorted((strip(e.key), e.steps) for e in store.ledger(cid)),
            "lineage": [(strip(v.id), v.step, v.eval_accuracy, v.selection_accuracy) for v in store.policy_lineage(cid)],
            "kept": [strip(json.dumps(e.message, sort_keys=True)) for e in store.events(cid, kind="kept_branch")],
        }

    def live_looks(sub: str) -> int:
        return sum(bool(t.get("live")) for m in (tmp_path / sub / "home" / "jobs").glob("*/meta.json")
                   for t in json.loads(m.read_text()).get("timings", []))

    # 18 steps: room for a backtest's second look, the one a live session trains
    a, b = run("a", budget={"total_steps": 18}), run("b", budget={"total_steps": 18}, launcher={"live_sessions": 0})
    assert a["decisions"] and a == b
    assert live_looks("a") > 0 and live_looks("b") == 0


def test_an_llm_endpoint_that_accepts_and_never_answers_falls_back_within_its_timeout_and_is_recorded(tmp_path):
    """Issue 18: the server takes the connection and says nothing. The round is not held hostage: after
    ``timeout_s`` the heuristic brain answers, the campaign goes on to a decision, and the event log says why."""
    from tests.llm_server import HANG, ScriptedLLM

    home = tmp_path / "home"
    with ScriptedLLM([HANG], hang_s=600) as llm:
        spec = _spec(tmp_path, backtest={"max_proposals": 1}, budget={"total_steps": 10},
                     brain={"kind": "llm", "llm": {"base_url": llm.base_url, "model": "scripted", "timeout_s": 1,
                                                    "max_retries": 0, "api_key_env": "EVOTRAINER_TEST_KEY"}})
        cid = start_campaign(spec, home, log=lambda _m: None)
        assert len(llm.requests) >= 1
    store = Store.for_home(home)
    assert store.get_campaign(cid).status == "finished"
    brain0 = next(e.message for e in store.events(cid, kind="brain") if e.message["round"] == 0)
    notes = "\n".join(brain0["notes"])
    assert brain0["brain"] == "llm→heuristic"
    assert "attempt 1: no complete answer within 1s" in notes and "fell back to the heuristic brain" in notes
    (p,) = store.list_proposals(cid, round=0)
    assert p.brain == "llm→heuristic" and store.get_decision(p.id) is not None


def test_round_0_scores_the_base_policy_once_on_the_selection_split(tmp_path):
    """For real: with no finding at warning (the group diagnostics quietened), round 0 scores the base policy on the
    selection split once (one event, with the policy's path), which the rollback and the health verdict read; when the
    segment fell below it beyond noise, the round's one serious finding is the campaign's own `regression`, and only
    a smaller step is proposed."""
    from evotrainer.agent.regression import DIAGNOSTIC as REGRESSION_DIAGNOSTIC

    home = tmp_path / "home"
    spec = _spec(tmp_path, eval={"difficulty": [1, 1]})
    quiet = ("diagnostics: {params: {too_hard: {warning: 1.0, critical: 1.0}, dead_groups: {warning: 1.0, critical: 1.0}, "
             "unusual_recipe: {warning: 1000.0}}}")  # a test's tiny pool of 64 prompts is no user's flaw
    (tmp_path / "h.yaml").write_text(HARNESS.replace("max_completion_length: 2", "max_completion_length: 4") + quiet)
    cid = start_campaign(spec, home, log=lambda m: None)
    store = Store.for_home(home)
    serious = [f for f in store.list_findings(cid, round=0) if f.severity in ("warning", "critical")]
    assert all(f.diagnostic == REGRESSION_DIAGNOSTIC for f in serious), serious
    (start,) = store.events(cid, kind="explore_start")
    assert (home / "policies") in Path(start.message["policy"]).parents and 0 <= start.message["accuracy"] <= 1
    (mode,) = [e.message for e in store.events(cid, kind="explore_mode") if e.message["round"] == 0]
    assert mode["before"] == start.message["accuracy"]
    if serious:  # a regressed round: the segment fell below the base, and only a smaller step was proposed
        assert all(p.knob == "optim.learning_rate" and p.new < p.old for p in store.list_proposals(cid, round=0))
    assert store.ledger_total(cid) <= 12 and store.get_campaign(cid).status == "finished"
