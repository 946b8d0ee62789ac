"""Data selection between segments: dynamic sampling at segment granularity and difficulty targeting."""

from __future__ import annotations

import pandas as pd
import pytest

from evotrainer.config.harness import HarnessSpec
from evotrainer.core.errors import ConfigError
from evotrainer.evidence.model import prompt_pass_stats
from evotrainer.tasks import get_task
from evotrainer.training.data import (
    build_pool,
    difficulty_range,
    selection_weights,
    stream_problems,
    to_dataset,
)


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
    chosen = stream_problems(pool, [0.0] * 15 + [1.0], 0, 0, 10)
    assert {p.id for p in chosen} == {ids[15]}
    ds = to_dataset(chosen)
    assert set(ds.column_names) == {"prompt", "problem_id", "answer", "difficulty", "meta"} and len(ds) == 10


def test_difficulty_range_defaults_and_bounds():
    task = get_task("arith")
    assert difficulty_range(task, HarnessSpec()) == (3, 3)
    assert difficulty_range(task, HarnessSpec().with_knob("data.difficulty", [1, 2])) == (1, 2)
    with pytest.raises(ConfigError, match="1..6"):
        difficulty_range(task, HarnessSpec().with_knob("data.difficulty", [2, 7]))


def test_any_window_of_a_seeds_stream_is_the_same_slice_of_one_sequence():
    """A job trained in pieces (forks under one seed) meets the prompts one longer run would, in its order."""
    pool = build_pool(get_task("arith"), HarnessSpec().with_knob("data.pool_size", 16), seed=0)
    for weights in ([1.0] * 16, [0.0] * 4 + [1.0] * 6 + [3.0] * 6):
        whole = stream_problems(pool, weights, 7, 0, 50)  # three epochs and a bit of a 16-problem pool
        pieces = stream_problems(pool, weights, 7, 0, 5) + stream_problems(pool, weights, 7, 5, 30) \
            + stream_problems(pool, weights, 7, 35, 15)
        assert [p.id for p in pieces] == [p.id for p in whole]
        assert [p.id for p in stream_problems(pool, weights, 8, 0, 50)] != [p.id for p in whole]  # the seed counts
    uniform = stream_problems(pool, [1.0] * 16, 7, 0, 48)
    for epoch in range(3):  # every prompt once per epoch, each epoch in its own order
        assert sorted(p.id for p in uniform[16 * epoch : 16 * (epoch + 1)]) == sorted(p.id for p in pool)
    assert uniform[:16] != uniform[16:32]
    weighted = stream_problems(pool, [0.0] * 4 + [1.0] * 12, 7, 3, 40)
    assert len(weighted) == 40 and not {p.id for p in weighted} & {p.id for p in pool[:4]}
    with pytest.raises(ValueError, match="start >= 0"):
        stream_problems(pool, [1.0] * 16, 7, -1, 5)
