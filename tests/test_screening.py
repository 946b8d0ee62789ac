"""Offline pre-screening on real recorded rollouts (a real TRL segment of the nano policy), and the Optuna study
behind numeric values surviving kill -9."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec
from evotrainer.evidence.model import read_metrics, read_rollouts
from evotrainer.jobs.runner import run_job
from evotrainer.stats.screening import screen, screen_run
from evotrainer.tasks import get_task
from tests.conftest import REPO

# a short completion budget on 1-digit sums: many groups all wrong, some live (even a warm start that guesses)
SEGMENT = """
name: screen-test
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 8, num_generations: 4, max_completion_length: 3}
data: {pool_size: 24, difficulty: [1, 1]}
"""


@pytest.fixture(scope="module")
def segment(shared_home, tmp_path_factory):
    h = tmp_path_factory.mktemp("screen") / "h.yaml"
    h.write_text(SEGMENT)
    spec = JobSpec(task="arith", harness=str(h), steps=6, seed=0, eval=EvalSpec(every=0, n=16, k=1), save_every=6,
                   policy=PolicySpec(size="nano", sft_steps=150, sft_batch_size=64), name="screened-segment")
    res = run_job(spec, shared_home)
    return Path(res.run_dir), load_harness(h)


def test_rescoring_the_segment_under_its_own_harness_reproduces_trl(segment):
    run_dir, h = segment
    s = screen_run(run_dir, h, "reward.format.weight", 0.5, get_task("arith"))
    assert s.screenable, s.reason  # the self-check against TRL's recorded advantages passed
    m = read_metrics(run_dir).dropna(subset=["loss"])
    # the dead share is TRL's frac_reward_zero_std over the same steps
    assert s.current.dead_share == pytest.approx(m["frac_reward_zero_std"].mean(), abs=1e-6)


def test_screening_predicts_the_dead_group_change_of_a_data_filter(segment):
    run_dir, h = segment
    df = read_rollouts(run_dir)
    s = screen_run(run_dir, h, "data.drop_all_wrong", True, get_task("arith"))
    assert s.screenable and not s.nil
    # what the filter leaves: the groups of prompts whose last group was not all wrong
    last = df[df["step"] == df.groupby("prompt_id")["step"].transform("max")]
    wrong = set(last.groupby("prompt_id")["correct"].any().loc[lambda x: ~x].index)
    assert wrong, "the fixture segment should have all-wrong prompts"
    groups = df.groupby("group_id").agg(pid=("prompt_id", "first"), dead=("reward", lambda r: np.isclose(r.std(), 0)))
    # the next segment draws from the whole pool: a prompt the segment never drew keeps weight 1 under the filter
    # and stands in for an average seen prompt, so each seen prompt weighs (1 or 0) + unseen / seen
    pool = json.loads((run_dir / "data_report.json").read_text())["pool"]
    seen = df["prompt_id"].nunique()
    unseen_share = (pool - seen) / seen
    w = np.where(groups["pid"].isin(wrong), 0.0, 1.0) + unseen_share
    assert s.predicted.dead_share == pytest.approx((groups["dead"] * w).sum() / w.sum(), abs=1e-9)
    assert s.predicted.dead_share < s.current.dead_share
    assert s.predicted.kept_share == pytest.approx(1 - len(wrong) / pool)
    # a pool far larger than the segment dilutes the same filter towards nil: most of the next draws are unseen
    big = screen(h, "data.drop_all_wrong", True, df, get_task("arith"), pool_size=100 * pool)
    assert abs(big.predicted.dead_share - big.current.dead_share) < abs(s.predicted.dead_share - s.current.dead_share) / 10
    # and a real fork under the filter draws from its lineage's pool without the all-wrong prompts, where one
    # without it draws them too (the dead share of 24 fresh groups is too noisy to compare at this size)
    forks = {}
    for name, extra in (("plain", ""), ("filtered", "drop_all_wrong: true, ")):
        f = run_dir.parent.parent / f"{name}.yaml"
        f.write_text(SEGMENT.replace("data: {", "data: {" + extra))
        spec = JobSpec(task="arith", harness=str(f), steps=3, seed=1, eval=EvalSpec(every=0, n=16, k=1), save_every=3,
                       policy=PolicySpec(size="nano", sft_steps=150, sft_batch_size=64), name=f"fork-{name}")
        r = run_job(spec, run_dir.parent.parent, fork="screened-segment")
        forks[name] = set(read_rollouts(Path(r.run_dir))["prompt_id"])
    assert forks["plain"] & wrong and not forks["filtered"] & wrong


def test_a_change_that_is_inert_on_the_segment_is_screened_out(segment):
    run_dir, h = segment
    task = get_task("arith")
    df = read_rollouts(run_dir)
    # the segment's rollouts of the prompts whose last group was not all correct (whole groups, TRL's advantages):
    # there, dropping all-correct prompts drops nothing
    last = df[df["step"] == df.groupby("prompt_id")["step"].transform("max")]
    solved = set(last.groupby("prompt_id")["correct"].all().loc[lambda x: x].index)
    hard = df[~df["prompt_id"].isin(solved)]
    assert len(hard) and hard["prompt_id"].nunique() > len(solved)
    s = screen(h, "data.drop_all_correct", True, hard, task)
    assert s.screenable and s.nil and "predicted effect on the signal: nil" in s.describe(), s.describe()
    if not solved:  # the same through the job directory, when the whole segment is such rollouts
        assert screen_run(run_dir, h, "data.drop_all_correct", True, task).nil
    # a term that is constant within every group moves no advantage (group scaling divides it out)
    constant = df.assign(well_formed=True)
    s = screen(h.with_knob("reward.format.weight", 0.0), "reward.format.weight", 0.3,
               constant.assign(advantage=_trl_advantages(constant, h.with_knob("reward.format.weight", 0.0))), task)
    assert s.screenable and s.nil, s.describe()
    # ... while changing advantage scaling moves it a lot
    assert not screen_run(run_dir, h, "grpo.scale_rewards", "none", task).nil


def _trl_advantages(df: pd.DataFrame, h: HarnessSpec) -> np.ndarray:
    r = h.reward.correctness.weight * df["reward_correctness"].to_numpy(float)
    g = pd.Series(r).groupby(df["group_id"].to_numpy())
    return (r - g.transform("mean").to_numpy()) / (g.transform(lambda x: x.std(ddof=1)).to_numpy() + 1e-4)


def test_changes_that_need_new_rollouts_are_not_screened(segment):
    run_dir, h = segment
    s = screen_run(run_dir, h, "optim.learning_rate", 1e-2, get_task("arith"))
    assert not s.screenable and not s.nil and "new rollouts" in s.reason
    s = screen_run(run_dir, h, "data.difficulty", [3, 4], get_task("arith"))
    assert not s.screenable and "never drew" in s.reason


# ---------------------------------------------------------------------------------------------- Optuna
KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    import optuna
    from evotrainer.agent.values import ValueOptimizer
    from evotrainer.config.harness import load_harness
    h = load_harness({harness!r})
    vo = ValueOptimizer(__import__("pathlib").Path({home!r}), "c", 0)
    vo.sync(h, "optim.learning_rate", [("c:r00:p0", 3e-5, 9e-5, 0.03, "promote")])
    if {when!r} == "before_ask":  # killed between the keyed enqueue and the ask
        optuna.study.Study.ask = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    choice = vo.suggest("c:r01:p0", h.with_knob("optim.learning_rate", 9e-5), "optim.learning_rate", 2.7e-4, 1)
    print(choice.model_dump_json(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # killed after the ask, before the proposal was written
""")


@pytest.mark.parametrize("when", ["after_ask", "before_ask"])
def test_the_optuna_study_resumes_after_kill_9_without_a_duplicate_trial(tmp_path, when):
    import optuna

    from evotrainer.agent.values import ValueOptimizer

    harness = str(REPO / "harnesses" / "demo-start.yaml")
    p = subprocess.run([sys.executable, "-c", KILLER.format(repo=str(REPO), harness=harness, home=str(tmp_path),
                                                            when=when)], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr[-2000:]
    h = load_harness(harness).with_knob("optim.learning_rate", 9e-5)
    vo = ValueOptimizer(tmp_path, "c", 0)
    vo.sync(h, "optim.learning_rate", [("c:r00:p0", 3e-5, 9e-5, 0.03, "promote")])
    again = vo.suggest("c:r01:p0", h, "optim.learning_rate", 2.7e-4, 1)
    if when == "after_ask":
        assert again.value == json.loads(p.stdout)["value"]
    assert again.source == "optuna-tpe" and again.trials == 1
    lo, hi = again.window
    assert lo <= again.value <= hi and lo > 9e-5  # "raise" stays a raise: from half the step to twice it
    trials = vo.study("optim.learning_rate").get_trials(deepcopy=False)
    assert sorted(t.user_attrs["proposal"] for t in trials) == ["c:r00:p0", "c:r01:p0"]  # no duplicate
    assert vo.suggest("c:r01:p0", h, "optim.learning_rate", 2.7e-4, 1).value == again.value  # a re-run: same
    # the decision is told once, even when synced twice
    for _ in range(2):
        assert vo.sync(h, "optim.learning_rate", [("c:r00:p0", 3e-5, 9e-5, 0.03, "promote"),
                                                  ("c:r01:p0", 9e-5, again.value, -0.01, "reject")]) == 2
    done = vo.study("optim.learning_rate").get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted(t.value for t in done) == [-0.01, 0.03]


def test_the_study_learns_from_moves_so_a_promoted_raise_is_not_asked_back_towards_its_old_value(tmp_path):
    """A raise 1e-6 -> 3e-6 that helped is a good *×3 move*: the next raise from 3e-6 is asked around ×3 (9e-6),
    not at the timid lower edge of its window, where a study of absolute values put it (next to 3e-6)."""
    import math

    from evotrainer.agent.values import ValueOptimizer, move_of

    h = load_harness(REPO / "harnesses" / "demo-start.yaml").with_knob("optim.learning_rate", 3e-6)
    asked = []
    for seed in range(8):
        vo = ValueOptimizer(tmp_path / str(seed), "c", seed)
        vo.sync(h, "optim.learning_rate", [("c:r00:p0", 1e-6, 3e-6, 0.015, "promote"),
                                           ("c:r00:p1", 1e-6, 1.5e-6, 0.002, "reject")])
        c = vo.suggest("c:r01:p0", h, "optim.learning_rate", 9e-6, 1)
        assert c.source == "optuna-tpe" and c.window[0] <= c.value <= c.window[1]
        asked.append(math.log(c.value / 3e-6))
        trial = next(t for t in vo.study("optim.learning_rate").get_trials() if t.user_attrs["proposal"] == "c:r01:p0")
        assert trial.params["move"] == pytest.approx(move_of("optim.learning_rate", 3e-6, c.value), rel=1e-6)
    low_edge = math.log(3 ** 0.5)
    assert sum(a > low_edge * 1.05 for a in asked) >= 6, asked  # not pinned to the timid edge
    assert move_of("grpo.max_completion_length", 8, 12) == 4.0 and move_of("grpo.temperature", 1.0, "x") is None


def test_one_optuna_storage_per_database_and_process_and_a_new_one_for_a_remade_database(tmp_path):
    """Every round's propose and distill open the campaign's study; the storage (an engine and a schema check,
    ~0.1 s) is opened once per process. A database removed and made again is opened afresh, not through the old
    engine."""
    from evotrainer.agent.values import ValueOptimizer

    h = load_harness(REPO / "harnesses" / "demo-start.yaml")
    first = ValueOptimizer(tmp_path, "c", 0)
    first.sync(h, "optim.learning_rate", [("c:r00:p0", 1e-6, 3e-6, 0.015, "promote")])
    again = ValueOptimizer(tmp_path, "c", 0)
    assert again.storage() is first.storage()
    assert len(again.study("optim.learning_rate").get_trials()) == 1
    assert ValueOptimizer(tmp_path, "other", 0).storage() is not first.storage()
    del first, again
    import gc

    gc.collect()
    first_db = tmp_path / "campaigns" / "c" / "optuna.db"
    first_db.rename(tmp_path / "kept.db")  # the old file stays (its inode cannot be reused), a new one is made
    remade = ValueOptimizer(tmp_path, "c", 0)
    assert remade.study("optim.learning_rate").get_trials() == []
    assert first_db.exists()


def test_values_fall_back_to_the_draft_without_history_and_keep_non_numeric_knobs(tmp_path):
    from evotrainer.agent.values import ValueOptimizer, search_window

    h = load_harness(REPO / "harnesses" / "demo-start.yaml")
    vo = ValueOptimizer(tmp_path, "c", 0)
    c = vo.suggest("c:r00:p0", h, "optim.learning_rate", 9e-5, 0)
    assert (c.value, c.source) == (9e-5, "fallback")
    assert vo.suggest("c:r00:p1", h, "grpo.scale_rewards", "none", 0).source == "fixed"
    # windows: log for the learning rate, linear and integer for the completion budget, clipped to bounds
    w = search_window(h, "optim.learning_rate", 3e-5, 9e-5)
    assert w.log and w.low == pytest.approx(3e-5 * 3 ** 0.5) and w.high == pytest.approx(2.7e-4)
    w = search_window(h, "grpo.max_completion_length", 8, 16)
    assert (w.low, w.high, w.integer, w.log) == (12, 24, True, False)
    w = search_window(h, "grpo.top_entropy_quantile", 1.0, 0.2)
    assert 0.0 <= w.low < w.high <= 0.6
    assert search_window(h, "optim.learning_rate", 0.05, 0.1).high == 0.1  # the knob's bound
    # a scale knob moved off zero has no log move: backtested as drafted, also when its study has history
    vo.sync(h, "optim.weight_decay", [("c:r00:p9", 0.01, 0.03, 0.02, "promote")])
    h0 = h.with_knob("optim.weight_decay", 0.0)
    c = vo.suggest("c:r01:p0", h0, "optim.weight_decay", 0.01, 1)
    assert (c.value, c.source) == (0.01, "fixed")
