"""Data selection between segments: dynamic sampling at segment granularity and difficulty targeting."""

from __future__ import annotations

import pandas as pd
import pytest

from evotrainer.config.harness import HarnessSpec
from evotrainer.data import build_pool, difficulty_range, segment_problems, selection_weights, to_dataset
from evotrainer.errors import ConfigError
from evotrainer.evidence import prompt_pass_stats
from evotrainer.tasks import get_task


def _rollouts(spec: dict[str, list[bool]], step: int = 1) -> pd.DataFrame:
    rows = [{"prompt_id": pid, "step": step, "correct": c} for pid, cs in spec.items() for c in cs]
    return pd.DataFrame(rows)


def test_pass_stats_use_the_latest_group():
    early = _rollouts({"a": [False] * 4, "b": [True] * 4}, step=1)
    late = _rollouts({"a": [True] * 4}, step=5)
    st = prompt_pass_stats(pd.concat([early, late])).set_index("prompt_id")
    assert st.loc["a", "pass_rate"] == 0.5 and bool(st.loc["a", "last_all_correct"])
    assert bool(st.loc["b", "last_all_correct"]) and not bool(st.loc["b", "last_all_wrong"])


def test_drop_rules_and_difficulty_targeting():
    task = get_task("arith")
    h = HarnessSpec().with_knob("data.pool_size", 16)
    pool = build_pool(task, h, seed=0)
    ids = [p.id for p in pool]
    stats = prompt_pass_stats(_rollouts({ids[0]: [True] * 4, ids[1]: [False] * 4, ids[2]: [True, False, True, False],
                                         ids[3]: [True, True, True, False]}))
    w, rep = selection_weights(pool, h, stats)
    assert w == [1.0] * 16 and rep["seen"] == 4  # uniform harness: evidence read but nothing dropped
    w, rep = selection_weights(pool, h.with_knob("data.drop_all_correct", True), stats)
    assert w[0] == 0.0 and w[1] == 1.0 and rep["dropped_all_correct"] == 1
    w, rep = selection_weights(pool, h.with_knob("data.drop_all_wrong", True), stats)
    assert w[1] == 0.0 and w[0] == 1.0 and rep["dropped_all_wrong"] == 1
    w, _ = selection_weights(pool, h.with_knob("data.sampling", "difficulty_targeted"), stats)
    assert w[2] == 1.0 > w[3] > w[0] and w[0] == w[1] == 0.05  # peak at pass rate 0.5
    chosen = segment_problems(pool, [0.0] * 15 + [1.0], 10, seed=0)
    assert {p.id for p in chosen} == {ids[15]}
    ds = to_dataset(chosen)
    assert set(ds.column_names) == {"prompt", "problem_id", "answer", "difficulty", "meta"} and len(ds) == 10


def test_difficulty_range_defaults_and_bounds():
    task = get_task("arith")
    assert difficulty_range(task, HarnessSpec()) == (3, 3)
    assert difficulty_range(task, HarnessSpec().with_knob("data.difficulty", [1, 2])) == (1, 2)
    with pytest.raises(ConfigError, match="1..6"):
        difficulty_range(task, HarnessSpec().with_knob("data.difficulty", [2, 7]))
