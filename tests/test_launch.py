"""Launchers (evotrainer.jobs.launchers): a batch of jobs runs side by side and comes back as typed outcomes in
order; a crash, a hang past the per-job timeout, exhausted memory or a job's own error fails only that job. Both engines for real:
local worker processes, and Ray with a local head started by the test (127.0.0.1, torn down at the end).

Side by side is shown, not timed: jobs named ``meet*`` wait at start until both have arrived
(``EVOTRAINER_MEET_RUNS``), which jobs run one after another never do.
"""

from __future__ import annotations

import pytest

from evotrainer.jobs.launchers import JobRequest, LocalLauncher, RayLauncher, make_launcher
from evotrainer.jobs.pool import PoolStopped
from evotrainer.jobs.scoring import ScoreRequest


def _faults(monkeypatch, tmp_path) -> None:
    meet = tmp_path / "meet"
    meet.mkdir()
    monkeypatch.setenv("EVOTRAINER_MEET_RUNS", r"^meet")
    monkeypatch.setenv("EVOTRAINER_MEET_DIR", str(meet))
    monkeypatch.setenv("EVOTRAINER_MEET_COUNT", "2")
    monkeypatch.setenv("EVOTRAINER_FAIL_RUNS", r"^crash$")
    monkeypatch.setenv("EVOTRAINER_HANG_RUNS", r"^hang$")
    monkeypatch.setenv("EVOTRAINER_OOM_RUNS", r"^oom$")


def _batch(tmp_path, *names: str) -> list[JobRequest]:
    # a job spec the worker refuses (no such task): the outcome is the job's own error, after everything else ran
    return [JobRequest(job={"task": "no-such-task", "name": n}, home=str(tmp_path / "home")) for n in names]


def _check(out) -> None:
    assert [o.status for o in out] == ["failed"] * 6
    for o in (out[0], out[1], out[5]):  # both met: they ran at the same time; the launcher went on after the faults
        assert "unknown task 'no-such-task'" in o.error, o.error
    assert "timed out" in out[3].error and "25 s per-job timeout" in out[3].error
    assert out[4].out_of_memory and out[4].error.startswith("out of memory: MemoryError"), out[4].error


def test_local_launcher_runs_a_batch_side_by_side_and_faults_fail_only_their_job(tmp_path, monkeypatch):
    _faults(monkeypatch, tmp_path)
    with LocalLauncher(workers=2, timeout_s=25) as launcher:
        launcher.warm()
        first = launcher.pids()
        assert len(first) == 2
        out = launcher.run_many(_batch(tmp_path, "meet-a", "meet-b", "crash", "hang", "oom", "after"))
        _check(out)
        assert out[2].error.startswith("worker process died")
        assert not set(first) <= set(launcher.pids())  # the crashed and the hung job's workers were ended
        launcher.stop()
        with pytest.raises(PoolStopped):
            launcher.run_many(_batch(tmp_path, "late"))


def test_ray_launcher_runs_jobs_as_parallel_ray_tasks_and_faults_fail_only_their_job(tmp_path, monkeypatch):
    _faults(monkeypatch, tmp_path)
    launcher = RayLauncher(num_cpus=2, timeout_s=25)
    try:
        launcher.warm()
        out = launcher.run_many(_batch(tmp_path, "meet-a", "meet-b", "crash", "hang", "oom", "after"))
        _check(out)
        assert out[2].error.startswith("Ray WorkerCrashedError"), out[2].error
        scored = launcher.score(ScoreRequest(task="arith", eval={"n": 4}, split="selection",
                                             policies=[(str(tmp_path / "nothing"), 4)]))
        assert scored.ok is False and "not a Hugging Face model directory" in scored.error
    finally:
        launcher.close()
    import ray

    assert not ray.is_initialized()  # the local head this launcher started is gone


def test_launcher_settings_are_checked_and_name_what_to_set():
    from evotrainer.config.campaign import LauncherSpec
    from evotrainer.core.errors import ConfigError

    with pytest.raises(ValueError, match="launcher.address, cpus_per_job and gpus_per_job are Ray settings"):
        LauncherSpec(kind="local", gpus_per_job=1)
    with pytest.raises(ValueError, match="give 'ray://HOST:PORT', 'auto'"):
        LauncherSpec(kind="ray", address="http://head:8265")
    assert LauncherSpec(kind="ray", address="ray://127.0.0.1:10001", gpus_per_job=0.5).gpus_per_job == 0.5
    with pytest.raises(ConfigError, match="use 'local' or 'ray'"):
        make_launcher("slurm")
    with pytest.raises(ConfigError, match="give 1 or more worker processes"):
        LocalLauncher(workers=0)
    # jobs side by side share the cores; one alone (a segment, a scoring call) gets them all; one worker has them all
    import os

    cores, two = os.cpu_count() or 1, LocalLauncher(workers=2)
    assert (two._cores_for(1), two._cores_for(9)) == (cores, max(1, cores // 2))
    assert LocalLauncher(workers=1)._cores_for(9) is None and LocalLauncher(workers=64)._cores_for(64) == 1
    # a batch's last jobs beyond the workers share every core among themselves
    half, quarter = max(1, cores // 2), max(1, cores // 4)
    assert two.shares(1) == [cores] and two.shares(2) == [half] * 2 and two.shares(4) == [half] * 4
    assert two.shares(9) == [half] * 8 + [cores] and two.shares(3) == [half, half, cores]
    assert LocalLauncher(workers=4).shares(10) == [quarter] * 8 + [half] * 2
    assert LocalLauncher(workers=1).shares(3) == [None] * 3 and RayLauncher().shares(3) == [None] * 3


def test_a_batchs_last_job_beyond_the_workers_computes_with_every_core_and_never_beside_another(tmp_path, monkeypatch):
    """Three jobs on two workers: the third has both cores, so it waits for the cores of the first, not only for
    a free worker. 'slow' waits at a meeting point for one more job; only 'last' could join it there, and it starts
    only once 'slow' is gone (ended by its per-job timeout), so 'slow' times out and 'last' then goes on."""
    import os

    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("one core: the last job has no more cores to take than the others")
    meet = tmp_path / "meet"
    meet.mkdir()
    monkeypatch.setenv("EVOTRAINER_MEET_RUNS", r"^(slow|last)$")
    monkeypatch.setenv("EVOTRAINER_MEET_DIR", str(meet))
    monkeypatch.setenv("EVOTRAINER_MEET_COUNT", "2")
    with LocalLauncher(workers=2, timeout_s=10) as launcher:
        launcher.warm()
        out = launcher.run_many(_batch(tmp_path, "slow", "quick", "last"))
    assert "timed out" in out[0].error, out[0].error  # nobody came while it ran: 'last' did not start beside it
    for o in out[1:]:  # 'quick' ended at once, yet 'last' waited; then it found 'slow''s mark and went on
        assert "unknown task 'no-such-task'" in o.error, o.error
    assert sorted(f.name.split(".")[0] for f in meet.iterdir()) == ["last", "slow"]


def test_a_campaign_on_ray_runs_a_looks_arms_side_by_side_and_resumes_after_its_owner_is_killed(tmp_path):
    """A tiny campaign with ``launcher: {kind: ray}`` (a local Ray head started by the campaign): its first look's
    control and treatment of one seed meet at start, so the backtest node submitted them together. Its owner is
    killed with SIGKILL mid backtest: Ray's processes go with it (the tasks it owned, and the head it started),
    and the resumed campaign finishes with every branch, decision and ledger row once."""
    import json
    import os
    import signal
    import time

    import psutil

    from evotrainer.core import procs
    from evotrainer.store import Store
    from tests.test_campaign import _alive, _cli, _only_campaign, _spec, _wait_for, _warm_base

    home = tmp_path / "home"
    _warm_base(home)
    meet = tmp_path / "meet"
    meet.mkdir()
    env = {"EVOTRAINER_MEET_RUNS": r"__r00__(control|treatment1)__s10000$", "EVOTRAINER_MEET_DIR": str(meet),
           "EVOTRAINER_MEET_COUNT": "2"}
    spec = _spec(tmp_path, backtest={"max_proposals": 1, "looks": 2, "branch_steps": 2}, budget={"total_steps": 11},
                 segment_steps=3, launcher={"kind": "ray"})
    jobs = home / "jobs"
    p = _cli("campaign", "start", str(spec), home=home, env=env, start_new_session=True)
    _wait_for(lambda: any(jobs.glob("*__treatment1__s10001/meta.json")), p, timeout=600)  # mid backtest
    store, camp = _only_campaign(home)
    refs = store.list_processes(camp.id)  # what the owner recorded: the Ray head's processes and their guard
    assert any("raylet" in " ".join(psutil.Process(r.pid).cmdline()) for r in refs if procs.alive(r.pid, r.started))
    os.kill(p.pid, signal.SIGKILL)  # the owner only, as the OOM killer would
    p.wait()
    deadline = time.monotonic() + 30
    while _alive(refs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(refs) == [], "Ray processes outlived the campaign that started them"
    met = {f.name.rsplit(".", 1)[0].split("__")[-2] for f in meet.iterdir()}
    assert met == {"control", "treatment1"}  # control and treatment of seed 10000 met: the look ran side by side

    q = _cli("campaign", "resume", camp.id, "--json", home=home, env=env)
    out, err = q.communicate(timeout=900)
    assert q.returncode == 0, err[-3000:]
    assert json.loads(out)["campaign"]["status"] == "finished"
    store = Store.for_home(home)
    (bt,) = store.list_backtests(camp.id)
    branches = store.list_branches(bt.id)
    assert sorted((b.role, b.seed) for b in branches) == [("control", 10000), ("control", 10001),
                                                          ("treatment", 10000), ("treatment", 10001)]
    assert all(b.status == "finished" for b in branches), [(b.run_name, b.error) for b in branches]
    assert len(store.list_decisions(camp.id)) == 1
    led = store.ledger(camp.id)
    assert len({e.key for e in led}) == len(led) and store.ledger_total(camp.id) <= 11
    from evotrainer.evidence.model import read_metrics

    for run in {e.run_name for e in led}:  # every step trained once, whichever process trained it
        m = read_metrics(jobs / run)
        steps = list(m.loc[m["loss"].notna(), "step"])
        assert sum(e.steps for e in led if e.run_name == run) == len(steps) == len(set(steps)), \
            (run, steps, [(e.key, e.steps) for e in led if e.run_name == run])


def test_a_score_request_splits_evenly_among_workers_and_joins_back_in_order():
    """What a launcher with several workers scores where (:func:`evotrainer.jobs.scoring.split_request`): about as
    many evaluations each, copies of one path together (loaded once), the merge with the fewest; and the parts'
    answers come back as the whole request's, in its order, or as the first failed part's error."""
    from evotrainer.jobs.scoring import join_answers, split_request

    req = {"task": "arith", "eval": {"n": 4}, "outcomes": True,
           "policies": [["a", 4], ["b", 4], ["c", 4]], "merge": {"name": "m"}}
    parts = split_request(req, 2)
    assert [idx for _, idx in parts] == [[1, 3], [0, 2]]  # the merged checkpoint's index is 3: it comes last
    assert [p["policies"] for p, _ in parts] == [[["b", 4]], [["a", 4], ["c", 4]]]
    assert "merge" in parts[0][0] and "merge" not in parts[1][0] and parts[1][0]["task"] == "arith"
    answers = [{"ok": True, "accuracies": [0.2, 0.9], "n": 4, "merged": "/m", "outcomes": [[0], [1]]},
               {"ok": True, "accuracies": [0.1, 0.3], "n": 4, "merged": None, "outcomes": [[2], [3]]}]
    assert join_answers(parts, answers) == {"ok": True, "accuracies": [0.1, 0.2, 0.3, 0.9], "n": 4, "merged": "/m",
                                            "outcomes": [[2], [0], [3], [1]]}
    bad = join_answers(parts, [answers[0], {"ok": False, "error": "boom"}])
    assert not bad["ok"] and bad["error"] == "part 2 of 2: boom"
    # the base within two budgets is one policy loaded once: it stays in one part
    conf = split_request({"policies": [["base", 4], ["end", 8], ["base", 8]]}, 2)
    assert [idx for _, idx in conf] == [[0, 2], [1]]
    # one worker, or one evaluation: the request as it is
    assert split_request(req, 1) == [(req, [0, 1, 2, 3])]
    assert split_request({"policies": [["a", 4]]}, 4) == [({"policies": [["a", 4]]}, [0])]
    assert len(split_request(req, 8)) == 4  # never more parts than evaluations
