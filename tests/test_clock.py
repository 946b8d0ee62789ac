"""The campaign's node clock (``agent/clock.py``): each lap is a node's wall time split into waits and own work."""

from __future__ import annotations

import json
import time

import pytest

from evotrainer.agent.clock import NodeClock, read_node_seconds


def test_a_lap_splits_wall_time_into_waits_and_own_work_and_the_file_sums_them(tmp_path):
    path = tmp_path / "c" / "timings.jsonl"
    clock = NodeClock(path)
    with clock.waiting("jobs"):
        time.sleep(0.05)
    time.sleep(0.03)
    first = clock.lap("backtest", 1)
    assert first["jobs_s"] >= 0.05 and first["scoring_s"] == 0.0
    assert first["own_s"] >= 0.03 and abs(first["wall_s"] - first["jobs_s"] - first["own_s"]) < 0.002
    with clock.waiting("scoring"):
        time.sleep(0.02)
    second = clock.lap("finish", 2)
    assert second["jobs_s"] == 0.0 and second["scoring_s"] >= 0.02  # waits do not carry over to the next lap
    time.sleep(0.2)
    clock.lap("review_wait", 2)  # a person's review: reported apart, never the campaign's own work
    with path.open("a") as f:
        f.write('{"node": "distill", "own_s": 1.0, "jobs_s"')  # a line cut by kill -9 mid-write
    got = read_node_seconds(path)
    assert got["laps"] == 3 and set(got["own"]) == {"backtest", "finish"} and got["review_wait"] >= 0.2
    assert got["jobs"] == round(first["jobs_s"], 1) and got["own_total"] == round(first["own_s"] + second["own_s"], 1)
    assert [json.loads(line)["node"] for line in path.read_text().splitlines()[:2]] == ["backtest", "finish"]
    assert read_node_seconds(tmp_path / "none.jsonl")["laps"] == 0


def test_an_unknown_wait_is_refused_with_the_kinds_allowed(tmp_path):
    with pytest.raises(ValueError, match="one of jobs, scoring"):
        with NodeClock(tmp_path / "t.jsonl").waiting("brain"):
            pass
