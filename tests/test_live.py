"""Backtest branches kept alive between looks (evotrainer/jobs/live.py): a look that goes on in a live Trainer must
train exactly what a resume from the look's checkpoint would, and what a job that never paused does; the run on
disk must stay a clean pause that anyone can resume; the sessions are bounded and released.

Real TRL jobs with the nano policy, in this process (a worker runs the same code; the campaign tests run it there).
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evotrainer.evidence.model import read_rollouts
from evotrainer.jobs import live
from evotrainer.jobs.jobdir import JobLock
from evotrainer.jobs.runner import run_job
from tests.test_jobs import _comparable, _spec


@pytest.fixture(scope="module")
def parent(shared_home, tmp_path_factory):
    h = tmp_path_factory.mktemp("h") / "tiny.yaml"
    h.write_text("name: tiny-test\noptim: {learning_rate: 0.001}\n"
                 "grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}\n"
                 "data: {pool_size: 64, difficulty: [1, 1]}\n")
    run_job(_spec(h, 2, name="live-parent"), shared_home)
    yield h
    live.release()


def _meta(home: Path, name: str) -> dict:
    return json.loads((home / "jobs" / name / "meta.json").read_text())


def _weights(res) -> dict[str, torch.Tensor]:
    return load_file(str(Path(res.checkpoint) / "model.safetensors"))


def test_looks_that_go_on_in_live_sessions_train_the_run_of_a_job_that_never_paused(parent, shared_home):
    """Two branches trained look by look, interleaved in one process as a backtest does (each look of one between
    two of the other, so the process's random streams move between a branch's looks)."""
    straight = {s: run_job(_spec(parent, 6, name=f"straight-{s}", seed=s), shared_home, fork="live-parent@2")
                for s in (5, 6)}
    names = {s: f"live-{s}" for s in straight}
    got = {}
    for upto in (4, 6, None):  # two looks, then on to the target (step 8)
        for s, name in names.items():
            first = upto == 4
            got[s] = live.run(_spec(parent, 6, name=name, seed=s), shared_home, fork="live-parent@2" if first else None,
                              resume=None if first else name, stop_at=upto, cap=4)
            assert got[s].steps_done == (upto or 8) and got[s].status == ("finished" if upto is None else "paused")
            assert gc.get_freeze_count() == 0  # a paused session hands its objects back to the collector
            meta = _meta(shared_home, name)
            if upto is not None:  # on disk, a clean pause: what a resume from anywhere needs
                assert meta["status"] == "paused" and meta["paused_at"] == upto and meta["mlflow_synced_step"] == upto
                JobLock.take(shared_home / "jobs" / name, name).release()  # the waiting session let go of the run
        assert sorted(live.live_names()) == ([] if upto is None else sorted(names.values()))
    for s, name in names.items():
        timings = _meta(shared_home, name)["timings"]
        # one session started the branch; the two after it went on live, with no set-up
        assert [(t["start_step"], t["steps_done"], bool(t.get("live"))) for t in timings] == [
            (2, 4, False), (4, 6, True), (6, 8, True)]
        assert all(t["setup_s"] == 0.0 and t["train_s"] > 0 for t in timings[1:])
        run_dir, ref = shared_home / "jobs" / name, Path(straight[s].run_dir)
        assert _comparable(run_dir) == _comparable(ref)
        a, b = read_rollouts(run_dir), read_rollouts(ref)
        assert a.drop(columns=["run_id"]).equals(b.drop(columns=["run_id"]))
        wa, wb = _weights(got[s]), _weights(straight[s])
        assert all(torch.equal(wa[k], wb[k]) for k in wb)
    # the two seeds trained different things: the comparison above could fail
    assert _comparable(shared_home / "jobs" / names[5]) != _comparable(shared_home / "jobs" / names[6])


def test_a_live_session_whose_run_another_process_resumed_lets_go_and_the_look_resumes_from_disk(parent, shared_home):
    name = "live-taken"
    live.run(_spec(parent, 6, name=name, seed=7), shared_home, fork="live-parent@2", resume=None, stop_at=4, cap=4)
    assert live.live_names() == [name]
    # another writer (a worker of another pool, a person) resumes the paused run meanwhile, to its next look
    other = run_job(_spec(parent, 6), shared_home, resume=name, stop_at=6)
    assert other.status == "paused" and other.steps_done == 6
    # this worker's next look (of another branch) ends the session whose run went on elsewhere: it held memory only
    b = live.run(_spec(parent, 6, name="live-taken-b", seed=7), shared_home, fork="live-parent@2", resume=None,
                 stop_at=4, cap=4)
    assert b.status == "paused" and live.live_names() == ["live-taken-b"]
    # and the look of the taken run resumes from its checkpoint at step 6
    res = live.run(_spec(parent, 6), shared_home, fork=None, resume=name, stop_at=None, cap=4)
    assert res.status == "finished" and res.steps_done == 8 and live.live_names() == ["live-taken-b"]
    live.release()
    timings = _meta(shared_home, name)["timings"]
    assert [(t["start_step"], t["steps_done"], bool(t.get("live"))) for t in timings] == [
        (2, 4, False), (4, 6, False), (6, 8, False)]
    straight = run_job(_spec(parent, 6, name="straight-7", seed=7), shared_home, fork="live-parent@2")
    assert _comparable(shared_home / "jobs" / name) == _comparable(Path(straight.run_dir))


def test_live_sessions_are_capped_and_released_and_a_released_run_resumes_from_its_pause(parent, shared_home):
    a = live.run(_spec(parent, 6, name="live-cap-a", seed=8), shared_home, fork="live-parent@2", resume=None,
                 stop_at=4, cap=1)
    # past the cap, a look ends its session as before: nothing else is held
    b = live.run(_spec(parent, 6, name="live-cap-b", seed=8), shared_home, fork="live-parent@2", resume=None,
                 stop_at=4, cap=1)
    assert a.status == b.status == "paused" and live.live_names() == ["live-cap-a"]
    b2 = live.run(_spec(parent, 6), shared_home, fork=None, resume="live-cap-b", stop_at=6, cap=1)
    assert b2.status == "paused" and live.live_names() == ["live-cap-a"]
    assert not _meta(shared_home, "live-cap-b")["timings"][-1].get("live")
    assert live.release() == 1 and live.live_names() == []
    meta = _meta(shared_home, "live-cap-a")
    assert meta["status"] == "paused" and meta["paused_at"] == 4  # released: the pause on disk is untouched
    # a look the released session would have trained resumes from the checkpoint, to the same run as b's
    a2 = live.run(_spec(parent, 6), shared_home, fork=None, resume="live-cap-a", stop_at=6, cap=1)
    assert a2.status == "paused" and not _meta(shared_home, "live-cap-a")["timings"][-1].get("live")
    assert _comparable(shared_home / "jobs" / "live-cap-a") == _comparable(shared_home / "jobs" / "live-cap-b")
    live.release()


def test_a_look_a_live_session_cannot_train_to_is_refused_as_a_resume_would_be(parent, shared_home):
    from evotrainer.core.errors import ConfigError

    live.run(_spec(parent, 6, name="live-back", seed=9), shared_home, fork="live-parent@2", resume=None, stop_at=6,
             cap=4)
    with pytest.raises(ConfigError, match="stop_at=4 must lie after the job's current step 6"):
        live.run(_spec(parent, 6), shared_home, fork=None, resume="live-back", stop_at=4, cap=4)
    assert live.live_names() == []
    meta = _meta(shared_home, "live-back")
    assert meta["status"] == "paused" and meta["paused_at"] == 6


def test_a_worker_keeps_a_branch_live_between_looks_until_the_pool_releases_it(parent, shared_home):
    """The path a campaign takes: ``BranchPool(live=N)`` in a spawned worker, and ``release()`` once the looks are
    over (then the run resumes from its checkpoint)."""
    from evotrainer.jobs.pool import BranchPool

    job = _spec(parent, 6, name="live-pool", seed=10).model_dump(mode="json")
    with BranchPool(workers=1, timeout_s=None, live=4) as pool:
        outs = [pool.run(job, shared_home, fork="live-parent@2", stop_at=4),
                pool.run(job, shared_home, resume="live-pool", stop_at=6)]
        assert all(o["ok"] and o["result"]["status"] == "paused" for o in outs), outs
        pool.release()
        assert not pool._holds_live
        done = pool.run(job, shared_home, resume="live-pool")
    assert done["ok"] and done["result"]["status"] == "finished" and done["result"]["steps_done"] == 8
    timings = _meta(shared_home, "live-pool")["timings"]
    assert [(t["start_step"], bool(t.get("live"))) for t in timings] == [(2, False), (4, True), (6, False)]


def test_a_look_at_the_target_finishes_the_job_and_keeps_nothing_alive(parent, shared_home):
    res = live.run(_spec(parent, 6, name="live-end", seed=11), shared_home, fork="live-parent@2", resume=None,
                   stop_at=8, cap=4)
    assert res.status == "finished" and res.steps_done == 8 and live.live_names() == []
    meta = _meta(shared_home, "live-end")
    assert meta["status"] == "finished" and "paused_at" not in meta
