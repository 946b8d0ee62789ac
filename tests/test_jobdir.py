"""A job directory is complete or absent, and has one writer: staged creation, the job lock, late writers refused.

Real files and real processes (a second process holds a job's lock); one real 1-step nano job for the runner.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evotrainer.core.errors import JobBusy, RunNotFound
from evotrainer.core.home import resolve_run
from evotrainer.jobs.jobdir import CREATING, JobLock, is_locked, publish, staging_dir
from tests.conftest import REPO

HOLDER = """
import sys, time
from pathlib import Path
from evotrainer.jobs.jobdir import JobLock
lock = JobLock.take(Path(sys.argv[1]), "held")
print("locked", flush=True)
time.sleep(600)
"""


def _hold(run_dir: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked", p.stderr.read()
    return p


def test_a_staged_job_is_invisible_until_published_and_a_name_is_won_once(tmp_path):
    jobs = tmp_path / "jobs"
    tmp, lock = staging_dir(jobs, "run-a")
    (tmp / "meta.json").write_text(json.dumps({"name": "run-a", "run_id": "r1"}))
    assert tmp.name.startswith(CREATING) and is_locked(tmp)
    with pytest.raises(RunNotFound):
        resolve_run(tmp_path, "run-a")  # half-made: never adopted
    with pytest.raises(RunNotFound):
        resolve_run(tmp_path, "latest")
    publish(tmp, jobs / "run-a")
    assert resolve_run(tmp_path, "run-a") == jobs / "run-a" and resolve_run(tmp_path, "latest") == jobs / "run-a"
    assert is_locked(jobs / "run-a")  # the lock moved with the folder
    lock.release()
    assert not is_locked(jobs / "run-a")
    other, lock2 = staging_dir(jobs, "run-a")
    (other / "meta.json").write_text("{}")
    with pytest.raises(FileExistsError):
        publish(other, jobs / "run-a")  # a second creator of the same name loses, the first is untouched
    assert json.loads((jobs / "run-a" / "meta.json").read_text())["run_id"] == "r1"
    lock2.release()


def test_debris_of_a_dead_creation_is_swept_but_a_live_one_is_kept(tmp_path):
    jobs = tmp_path / "jobs"
    dead, lock = staging_dir(jobs, "dead")
    lock.release()  # its creator is gone (the kernel drops the lock of a killed process the same way)
    live = jobs / f"{CREATING}live-0"
    live.mkdir()
    holder = _hold(live)
    try:
        fresh, lock3 = staging_dir(jobs, "next")
        assert not dead.exists() and live.exists() and fresh.exists()
        lock3.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_second_writer_is_refused_naming_the_holder_until_it_is_gone(tmp_path):
    run_dir = tmp_path / "jobs" / "r"
    run_dir.mkdir(parents=True)
    holder = _hold(run_dir)
    try:
        with pytest.raises(JobBusy, match=rf"run r is being written by pid {holder.pid} on .*one writer") as err:
            JobLock.take(run_dir, "r")
        assert err.value.exit_code == 2
    finally:
        holder.kill()
        holder.wait()
    JobLock.take(run_dir, "r").release()  # the kernel released the dead holder's lock


def test_run_job_publishes_a_complete_directory_and_refuses_late_writers(shared_home, tiny_harness):
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.jobs.runner import run_job

    spec = JobSpec(task="arith", harness=str(tiny_harness), steps=1, seed=0,
                   policy=PolicySpec(size="nano", sft_steps=150, sft_batch_size=64), eval=EvalSpec(every=0, n=16, k=1),
                   save_every=1, name="jobdir-once")
    res = run_job(spec, shared_home)
    run_dir = Path(res.run_dir)
    assert run_dir == shared_home / "jobs" / "jobdir-once" and not list((shared_home / "jobs").glob(CREATING + "*"))
    assert not is_locked(run_dir)  # released when the job returned
    before = (run_dir / "meta.json").read_text()
    holder = _hold(run_dir)  # e.g. a worker of a dead campaign that still trains it
    try:
        with pytest.raises(JobBusy, match=f"pid {holder.pid}"):
            run_job(spec, shared_home, resume="jobdir-once")
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(JobBusy, match="finished.*never rewritten.*--fork jobdir-once"):
        run_job(spec, shared_home, resume="jobdir-once")
    assert (run_dir / "meta.json").read_text() == before


def test_run_meta_reads_a_job_record_one_way_and_knows_where_the_job_stands(tmp_path):
    import json

    from evotrainer.core.runmeta import read_run_meta, run_meta_dict

    d = tmp_path / "job"
    d.mkdir()
    assert read_run_meta(d) is None and run_meta_dict(d) == {}
    for garbage in ("{not json", "", "[1, 2]", '{"target_step": "six"}', "\udcff"):
        (d / "meta.json").write_text(garbage, errors="surrogateescape")
        assert read_run_meta(d) is None, garbage
    base = {"status": "running", "start_step": 3, "target_step": 6, "run_id": "r", "extra": {"kept": True}}
    cases = [({}, 3), ({"status": "paused", "paused_at": 4}, 4), ({"paused_at": 5, "last_checkpoint_step": 5}, 5),
             ({"status": "finished", "paused_at": None}, 6)]
    for update, reached in cases:
        (d / "meta.json").write_text(json.dumps({**base, **update}))
        meta = read_run_meta(d)
        assert meta is not None and meta.reached == reached, update
        assert meta.raw["extra"] == {"kept": True} and run_meta_dict(d)["run_id"] == "r"
        assert set(meta.raw) == {k for k, v in {**base, **update}.items() if v is not None}  # no key the file lacks
