"""The branch pool's workers: they die with their owner however it dies, and a hung job is ended by its timeout.

Real processes throughout: an owner process is started and killed with SIGKILL, and the workers are checked by
pid and start time (a zombie waiting for its new parent to reap it counts as gone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from evotrainer.core import procs
from evotrainer.jobs.pool import BranchPool
from tests.conftest import REPO

# The owner starts its pool from a thread that ends at once: the workers must survive that thread (the
# parent-death signal is tied to the thread that started them) and die only with the process.
OWNER = """
import sys, threading, time
from evotrainer.jobs.pool import BranchPool
pool = BranchPool(workers=2, timeout_s=None)
t = threading.Thread(target=pool.warm)
t.start(); t.join()
time.sleep(1.0)
print(" ".join(map(str, pool.pids())), flush=True)
time.sleep(600)
"""


def _gone_within(refs: list[procs.ProcessRef], seconds: float) -> list[int]:
    """Pids of ``refs`` still alive after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [r.pid for r in refs if procs.alive(r.pid, r.started)]
        if not left:
            return []
        time.sleep(0.1)
    return [r.pid for r in refs if procs.alive(r.pid, r.started)]


def test_workers_die_within_seconds_when_their_owner_is_killed():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = owner.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, owner.stderr.read()[-3000:] if owner.poll() is not None else line
        refs = [procs.ref(p) for p in pids]
        assert all(r is not None for r in refs), "a worker died with the thread that started it"
        assert all(psutil.Process(p).ppid() == owner.pid for p in pids)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _gone_within(refs, 5.0) == []
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.wait()


def test_a_hung_job_is_ended_by_its_timeout_and_the_pool_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOTRAINER_HANG_RUNS", r"__hang$")
    bad = {"task": "no-such-task", "name": "x__ok"}  # fails fast in run_job: shows that a worker answers
    with BranchPool(workers=1, timeout_s=3.0) as pool:
        first = pool.run(bad, tmp_path, timeout_s=None)  # waits for the worker's imports, then fails validation
        assert not first["ok"] and "no-such-task" in first["error"]
        (pid,) = pool.pids()
        worker = procs.ref(pid)
        hung = pool.run({**bad, "name": "x__hang"}, tmp_path)
        assert not hung["ok"] and "timed out" in hung["error"] and "3 s per-job timeout" in hung["error"]
        assert _gone_within([worker], 5.0) == [] and pool.pids() == []
        again = pool.run(bad, tmp_path, timeout_s=None)  # a new worker
        assert not again["ok"] and "no-such-task" in again["error"] and pool.pids() != [pid]


def test_stop_abandons_the_job_in_flight_and_refuses_new_ones(tmp_path, monkeypatch):
    import threading

    from evotrainer.jobs.pool import PoolStopped

    monkeypatch.setenv("EVOTRAINER_HANG_RUNS", r"__hang$")
    with BranchPool(workers=1, timeout_s=None) as pool:
        pool.run({"task": "no-such-task", "name": "x"}, tmp_path)  # the worker is up
        result: dict = {}

        def run():
            try:
                result["out"] = pool.run({"task": "no-such-task", "name": "x__hang"}, tmp_path)
            except PoolStopped as err:
                result["stopped"] = str(err)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1.0)
        pool.stop()
        t.join(timeout=30)
        assert "abandoned" in result.get("stopped", ""), result
        try:
            pool.run({"task": "no-such-task", "name": "y"}, tmp_path)
        except PoolStopped as err:
            assert "not started" in str(err)
        else:
            raise AssertionError("a stopped pool ran a job")


def test_a_resume_ends_leftover_workers_by_pid_and_start_time_only(tmp_path):
    """Processes recorded for a campaign are ended before work restarts; a pid that now belongs to another
    process (its start time differs: here this test's own process) is left alone. All records are forgotten."""
    from evotrainer.agent.owner import end_leftovers
    from evotrainer.store import Store

    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
            store.create_campaign("c", "n", {}, "t")
            me = procs.this_process()
            reused = procs.ProcessRef(me.host, me.pid, me.started - 3600.0)  # our pid, someone else's start time
            store.record_processes("c", [procs.ref(leftover.pid), reused])
            ended = end_leftovers(store, "c")
            assert [r.pid for r in ended] == [leftover.pid]
            assert leftover.wait(timeout=10) == -signal.SIGKILL
            assert procs.alive(me.pid, me.started)  # still here
            assert store.list_processes("c") == []
            (ev,) = store.events("c", kind="leftovers_ended")
            assert ev.message["ended"] == [leftover.pid]
    finally:
        if leftover.poll() is None:
            leftover.kill()
        leftover.wait()
