"""Evidence written off the hot path — MLflow metrics in batches, rollout files on a writer thread — is all
there at checkpoints and at the end of a run."""

from __future__ import annotations

from evotrainer.core import tracking
from evotrainer.core.tracking import Tracker


def _steps(tr: Tracker, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in tr.client.get_metric_history(run_id, key))


def test_buffered_metrics_are_written_every_flush_every_steps_at_flush_and_at_run_end(tmp_path):
    tr = Tracker(tmp_path)
    rid = tr.create_run("buffered", {})
    for step in range(1, tracking.FLUSH_EVERY):
        tr.log_metrics(rid, step, {"loss": 0.5, "reward": float(step), "skip": float("nan")}, buffered=True)
    assert _steps(tr, rid, "reward") == []  # held back: one SQLite commit per step is what buffering avoids
    tr.log_metrics(rid, tracking.FLUSH_EVERY, {"reward": 1.0}, buffered=True)
    assert _steps(tr, rid, "reward") == list(range(1, tracking.FLUSH_EVERY + 1))  # the threshold wrote them
    tr.log_metrics(rid, 11, {"reward": 2.0}, buffered=True)
    tr.flush(rid)  # what a checkpoint does
    assert _steps(tr, rid, "reward")[-1] == 11
    tr.log_metrics(rid, 12, {"reward": 3.0, "eval/pass@8": 0.25}, buffered=True)
    assert tr.max_step(rid, "reward") == 12  # a resume's question flushes first
    tr.log_metrics(rid, 13, {"reward": 4.0}, buffered=True)
    tr.end_run(rid, "FINISHED")
    assert _steps(tr, rid, "reward")[-1] == 13 and _steps(tr, rid, "eval/pass_at_8") == [12]
    assert _steps(tr, rid, "skip") == []  # non-finite values are never sent
    assert tr.client.get_run(rid).info.status == "FINISHED"


def test_unbuffered_metrics_are_written_at_once(tmp_path):
    tr = Tracker(tmp_path)
    rid = tr.create_run("direct", {})
    tr.log_metrics(rid, 3, {"loss": 1.5})
    assert _steps(tr, rid, "loss") == [3]


def test_rollout_files_written_in_the_background_are_complete_after_wait(tmp_path):
    from evotrainer.evidence.model import RolloutRecorder, read_rollouts

    rec = RolloutRecorder(tmp_path, "run")
    for step in (1, 2, 3):
        rec.begin_batch()
        rec.add([{"step": step, "prompt_id": f"p{i}", "completion": "<script>x</script>" * i, "correct": i % 2 == 0}
                 for i in range(4)])
        rec.finish_batch([0.5] * 4, [0.1] * 4)
        rec.flush(wait=False)  # what the step callback does
    rec.wait()  # what a checkpoint does
    df = read_rollouts(tmp_path)
    assert sorted(df["step"].unique()) == [1, 2, 3] and len(df) == 12
    assert df["completion"].iloc[3] == "<script>x</script>" * 3  # text is data, stored as it came
    rec.begin_batch()
    rec.add([{"step": 4, "prompt_id": "p0", "completion": "", "correct": False}])
    rec.finish_batch([0.0], [0.0])
    assert [p.name for p in rec.flush()] == ["step_000004.parquet"]  # a synchronous flush waits for the queue first
    rec.close()
    assert len(read_rollouts(tmp_path)) == 13


def test_backfill_writes_only_the_steps_mlflow_lacks_up_to_the_resume_point(tmp_path):
    """A kill between a checkpoint's files and its MLflow flush: the resumed job backfills from metrics.jsonl."""
    import pandas as pd

    tr = Tracker(tmp_path)
    rid = tr.create_run("killed", {})
    for step in (1, 2, 3, 4):
        tr.log_metrics(rid, step, {"loss": 0.1 * step, "reward": float(step)})
    tr.log_metrics(rid, 6, {"eval/greedy_accuracy": 0.5})  # a key MLflow already has further
    frame = pd.DataFrame({"step": [1, 2, 3, 4, 5, 6, 7],
                          "loss": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
                          "reward": [1.0, 2.0, 3.0, 4.0, 5.0, float("nan"), 7.0],
                          "eval/greedy_accuracy": [None, None, None, None, 0.25, 0.5, None]})
    assert tr.backfill(rid, frame, 6) == 3  # loss 5, 6 and reward 5; nothing past the resume step, no NaN
    assert _steps(tr, rid, "loss") == [1, 2, 3, 4, 5, 6]
    assert _steps(tr, rid, "reward") == [1, 2, 3, 4, 5]
    assert _steps(tr, rid, "eval/greedy_accuracy") == [6]  # step 5 is older than what MLflow has for this key
    assert tr.backfill(rid, frame, 6) == 0  # a second resume writes nothing twice
    assert tr.backfill(rid, pd.DataFrame({"step": pd.Series([], dtype="int64")}), 6) == 0


def test_a_kill_while_mlflow_creates_its_database_leaves_a_home_that_works(tmp_path):
    """Found by bench/soak.py: a ``train`` killed while MLflow migrated its new SQLite database (~60 revisions, not
    transactional) left a schema every later command refused. The database now appears whole or not at all."""
    import signal
    import subprocess
    import sys
    import time

    home = tmp_path / "home"
    home.mkdir()
    code = "import sys; from pathlib import Path; from evotrainer.core.tracking import Tracker; Tracker(Path(sys.argv[1]))"
    p = subprocess.Popen([sys.executable, "-c", code, str(home)])
    deadline = time.monotonic() + 120
    while not any(home.glob("*mlflow.db*")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert p.poll() is None, "the database was created before the test could interrupt it"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (home / "mlflow.db").exists()  # the half-built tables stayed in the private file
    tracker = Tracker(home)
    run_id = tracker.create_run("after", {})
    tracker.log_metrics(run_id, 1, {"loss": 0.5})
    assert [m.step for m in tracker.client.get_metric_history(run_id, "loss")] == [1]
    assert sorted(x.name for x in home.iterdir() if "mlflow.db" in x.name) == ["mlflow.db"]  # the dead one's too
