"""The MLflow tracker's buffered per-step logging: nothing is lost at checkpoints or at the end of a run."""

from __future__ import annotations

from evotrainer import tracking
from evotrainer.tracking import Tracker


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
