"""Real GRPO jobs on TRL with the nano policy: evidence, MLflow, forks, resume after kill -9, errors.

Everything is real (TRL GRPOTrainer, MLflow on SQLite, Parquet); sizes and step budgets are tiny.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import HarnessSpec
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec
from evotrainer.core.errors import ConfigError, RunNotFound, TaskError
from evotrainer.core.runmeta import RunMeta, read_run_meta
from evotrainer.evidence.model import ROLLOUT_SCHEMA, read_metrics, read_rollouts, undocumented_metrics
from evotrainer.jobs.lineage import complete_checkpoints
from evotrainer.jobs.runner import run_job
from evotrainer.training.evaluation import eval_steps
from tests.conftest import REPO, TINY_HARNESS, small_context

NANO = PolicySpec(size="nano", sft_steps=150, sft_batch_size=64)
P, G = 4, 4


def _spec(harness: Path, steps: int, **kw) -> JobSpec:
    return JobSpec(
        task="arith", harness=str(harness), steps=steps, seed=kw.pop("seed", 0), policy=NANO,
        eval=EvalSpec(every=kw.pop("eval_every", 2), n=16, k=4), save_every=kw.pop("save_every", 2), **kw,
    )


def _client(home: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")


@pytest.fixture(scope="module")
def first_run(shared_home, tmp_path_factory):
    h = tmp_path_factory.mktemp("h") / "tiny.yaml"
    h.write_text(TINY_HARNESS)
    return run_job(_spec(h, 3, name="first"), shared_home), h


def test_train_updates_every_parameter_and_writes_evidence(first_run, shared_home):
    res, _ = first_run
    assert res.steps_done == 3 and res.status == "finished"
    run_dir = Path(res.run_dir)
    rollouts = read_rollouts(run_dir)
    assert (rollouts["advantage"].abs() > 1e-6).any(), "no learning signal in the test run"
    base = load_file(str(next(Path(json.loads((run_dir / "meta.json").read_text())["base_policy"]).glob("*.safetensors"))))
    final = load_file(str(Path(res.checkpoint) / "model.safetensors"))
    assert base.keys() == final.keys()
    unchanged = [k for k in base if torch.equal(base[k], final[k])]
    assert unchanged == [], f"parameters not updated by GRPO: {unchanged}"
    # the whole optimiser step is timed, and it contains TRL's part of it
    m = read_metrics(run_dir).dropna(subset=["loss"])
    assert len(m) == 3 and (m["step_wall_time"] >= m["step_time"]).all()
    # when each step ran (bench/campaign.py unions these over jobs side by side): one after another, in the job's life
    began, ended = (m["step_end_time"] - m["step_wall_time"]).tolist(), m["step_end_time"].tolist()
    assert all(b >= e - 0.01 for b, e in zip(began[1:], ended[:-1])), (began, ended)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert ended[-1] - began[0] <= meta["timings"][0]["wall_s"] + 0.01
    assert sorted(int(f.name[5:11]) for f in (run_dir / "rollouts").glob("step_*.parquet")) == [1, 2, 3]


def test_rollout_parquet_schema_groups_and_advantages(first_run):
    res, _ = first_run
    files = sorted((Path(res.run_dir) / "rollouts").glob("step_*.parquet"))
    assert [f.name for f in files] == [f"step_{i:06d}.parquet" for i in (1, 2, 3)]
    for f in files:
        assert pq.read_schema(f).equals(ROLLOUT_SCHEMA, check_metadata=False)
    df = read_rollouts(Path(res.run_dir))
    assert len(df) == 3 * P * G
    assert (df["run_id"] == res.run_id).all()
    assert df.groupby("group_id").size().eq(G).all()
    assert df.groupby("group_id")["prompt_id"].nunique().eq(1).all()
    # Total reward is the weighted sum of the terms (correctness 1.0, format 0.1; others off).
    expected = df["reward_correctness"] + 0.1 * df["reward_format"]
    assert (df["reward"] - expected).abs().max() < 1e-6
    assert df["reward_overlong"].isna().all() and df["reward_repetition"].isna().all()
    # Advantages line up with their rollouts: group-normalised, positive exactly when above the group mean.
    for _, g in df.groupby("group_id"):
        assert abs(g["advantage"].sum()) < 1e-3
        above = g["reward"] > g["reward"].mean() + 1e-9
        assert (g.loc[above, "advantage"] > 0).all()
    assert df["correct"].dtype == bool and (df["length"] <= 6).all()
    assert (df.loc[df["truncated"], "length"] == 6).all()


def test_mlflow_has_trl_metric_names_eval_and_artifacts(first_run, shared_home):
    res, _ = first_run
    client = _client(shared_home)
    run = client.get_run(res.run_id)
    keys = set(run.data.metrics)
    for k in ["reward", "reward_std", "frac_reward_zero_std", "entropy", "completions/mean_length",
              "completions/clipped_ratio", "clip_ratio/region_mean", "grad_norm", "rewards/correctness/mean",
              "rewards/format/mean", "accuracy", "eval/greedy_accuracy", "eval/pass_at_4", "loss"]:
        assert k in keys, k
    assert undocumented_metrics(keys) == []
    assert [m.step for m in client.get_metric_history(res.run_id, "reward")] == [1, 2, 3]
    assert sorted(m.step for m in client.get_metric_history(res.run_id, "eval/greedy_accuracy")) == [0, 2, 3]
    assert run.info.status == "FINISHED"
    assert run.data.tags["evotrainer.harness_version"] and run.data.params["harness.grpo.num_generations"] == "4"
    arts = {a.path for a in client.list_artifacts(res.run_id, "rollouts")}
    assert arts == {f"rollouts/step_{i:06d}.parquet" for i in (1, 2, 3)}


def test_every_emitted_metric_is_documented_including_kl_and_entropy_bonus(shared_home, tmp_path):
    h = tmp_path / "kl.yaml"
    text = TINY_HARNESS + "reward: {overlong: {weight: 1.0, buffer: 2}, repetition: {weight: 0.5}}\n"
    h.write_text(text.replace("grpo: {", "grpo: {beta: 0.05, entropy_coef: 0.01, use_adaptive_entropy: true, "))
    res = run_job(_spec(h, 1, eval_every=0, name="kl"), shared_home)
    keys = set(read_metrics(Path(res.run_dir)).columns)
    assert {"kl", "rewards/overlong/mean", "rewards/repetition/mean", "entropy_coef"} <= keys
    assert undocumented_metrics(keys) == []


def test_fork_records_lineage_starts_from_parent_weights_and_applies_new_lr(first_run, shared_home, tmp_path):
    parent, _ = first_run
    child_h = tmp_path / "child.yaml"
    child_h.write_text(
        TINY_HARNESS.replace("learning_rate: 0.001", "learning_rate: 0.0005").replace(
            "data: {", "data: {drop_all_correct: true, drop_all_wrong: true, "
        )
    )
    res = run_job(_spec(child_h, 2, name="child", seed=1), shared_home, fork=f"{parent.name}@2")
    run_dir = Path(res.run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["parent_run"] == parent.name and meta["parent_step"] == 2
    assert res.steps_done == 4  # continues the parent's step axis: 2 + 2
    tags = _client(shared_home).get_run(res.run_id).data.tags
    assert tags["evotrainer.parent_run_id"] == parent.run_id and tags["evotrainer.parent_step"] == "2"
    assert tags["evotrainer.parent_harness_version"] != tags["evotrainer.harness_version"]
    assert [t["warm_start_s"] for t in meta["timings"]] == [0.0] and res.warm_start_seconds == 0.0  # parent's base
    # Starts from the parent's weights at step 2, not from the base policy.
    pw = load_file(str(complete_checkpoints(Path(parent.run_dir))[2] / "model.safetensors"))
    cw = load_file(str(complete_checkpoints(run_dir)[2] / "model.safetensors"))
    assert all(torch.equal(pw[k], cw[k]) for k in pw)
    # The new learning rate is in effect (not the one restored from the parent's optimizer state).
    assert read_metrics(run_dir)["learning_rate"].dropna().tolist() == [0.0005, 0.0005]
    # Data rules read the parent's evidence, on the parent's pool: the fork (seed 1) draws its pool from its
    # lineage's seed (0), so every prompt the parent trained on is in it and counted as seen.
    assert meta["pool_seed"] == 0
    report = json.loads((run_dir / "data_report.json").read_text())
    parent_prompts = read_rollouts(Path(parent.run_dir)).query("step <= 2")["prompt_id"].nunique()
    assert report["seen"] == parent_prompts > 0
    assert read_rollouts(run_dir)["step"].min() == 3


def test_fork_and_resume_errors_name_the_run(first_run, shared_home, tiny_harness, tmp_path):
    parent, _ = first_run
    # a fork trains its parent's base (256 positions), whatever context the fork's own policy spec names
    long = tmp_path / "long.yaml"
    long.write_text(TINY_HARNESS.replace("max_completion_length: 6", "max_completion_length: 300"))
    wide = JobSpec(task="arith", harness=str(long), steps=1, eval=EvalSpec(every=0),
                   policy=NANO.model_copy(update={"max_position_embeddings": 1024}))
    with pytest.raises(ConfigError, match=r"max_completion_length=300 .* 256 positions"):
        run_job(wide, shared_home, fork=f"{parent.name}@2")
    with pytest.raises(RunNotFound, match=r"no checkpoint at step 1; available steps: \[2, 3\]"):
        run_job(_spec(tiny_harness, 1), shared_home, fork=f"{parent.name}@1")
    with pytest.raises(RunNotFound, match="no run 'ghost'"):
        run_job(_spec(tiny_harness, 1), shared_home, resume="ghost")
    with pytest.raises(ConfigError, match="exclusive"):
        run_job(_spec(tiny_harness, 1), shared_home, resume=parent.name, fork=parent.name)


def test_unknown_task_and_bad_difficulty_fail_before_writing(tmp_path, tiny_harness):
    home = tmp_path / "home"
    with pytest.raises(TaskError, match="arith"):
        run_job(JobSpec(task="nope", harness=str(tiny_harness), steps=1, policy=NANO), home)
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY_HARNESS.replace("difficulty: [1, 1]", "difficulty: [1, 9]"))
    with pytest.raises(ConfigError, match=r"outside task 'arith' levels 1\.\.6"):
        run_job(_spec(bad, 1), home)
    long = tmp_path / "long.yaml"  # NANO has 256 positions: a 256-token completion leaves the prompt none
    long.write_text(TINY_HARNESS.replace("max_completion_length: 6", "max_completion_length: 256"))
    with pytest.raises(ConfigError, match=r"long\.yaml: grpo\.max_completion_length=256 .* 256 positions .* at most 255"):
        run_job(_spec(long, 1), home)
    assert not (home / "jobs").exists()


def _cli(*args, home: Path, **popen):
    env = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_cli_errors_exit_2_and_write_nothing(tmp_path):
    home = tmp_path / "home"
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: {num_generations: 1}\n")
    p = _cli("train", "--harness", str(bad), "--steps", "1", home=home)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 2, err
    assert "bad.yaml" in err and "grpo.num_generations" in err and "greater than or equal to 2" in err
    assert not (home / "jobs").exists()
    p = _cli("train", "--task", "nope", "--steps", "1", home=home)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "arith" in err and "countdown" in err
    p = _cli("train", "--resume", "ghost", home=home)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "ghost" in err


def test_resume_after_kill_9_continues_at_the_right_step_without_duplicates(shared_home, tiny_harness):
    # Warm the nano base in this home first so the subprocess starts training quickly.
    # 30 steps: the kill lands after step 3 with a wide margin (6 steps once finished before the kill landed)
    args = ["train", "--task", "arith", "--harness", str(tiny_harness), "--steps", "30", "--policy", "nano",
            "--sft-steps", "150", "--eval-every", "0", "--save-every", "2", "--name", "killed"]
    p = _cli(*args, home=shared_home, start_new_session=True)
    run_dir = shared_home / "jobs" / "killed"
    deadline = time.time() + 300
    while time.time() < deadline:
        ck = complete_checkpoints(run_dir) if run_dir.exists() else {}
        steps = set(read_metrics(run_dir)["step"]) if (run_dir / "metrics.jsonl").exists() else set()
        if 2 in ck and 3 in steps:
            break
        assert p.poll() is None, p.communicate()[1][-3000:]
        time.sleep(0.2)
    else:
        pytest.fail("job did not reach step 3 in time")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "running"  # killed, not finished

    q = _cli("train", "--resume", "killed", "--json", home=shared_home)
    out, err = q.communicate(timeout=600)
    assert q.returncode == 0, err[-3000:]
    doc = json.loads(out)
    assert set(doc) >= {"run_id", "steps_done", "checkpoint", "evidence", "metrics"}
    assert doc["steps_done"] == 30 and doc["checkpoint"].endswith("checkpoint-30")
    lines = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [ln["step"] for ln in lines if "loss" in ln]
    assert train_steps == list(range(1, 31))
    df = read_rollouts(run_dir)
    assert sorted(df["step"].unique()) == list(range(1, 31))
    assert df.groupby("step").size().eq(P * G).all()
    hist = _client(shared_home).get_metric_history(doc["run_id"], "loss")
    assert sorted(m.step for m in hist) == list(range(1, 31))


def _comparable(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock columns (the only ones allowed to differ between two runs)."""
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in r.items() if "time" not in k and not k.endswith("per_second")} for r in rows]
    return [r for r in rows if set(r) - {"step", "epoch"}]  # the Trainer's end-of-train line holds only the epoch


def test_the_same_spec_and_seed_give_the_same_metrics_step_for_step(shared_home, tmp_path):
    # Two homes share the warm-started base (same cache), so only the GRPO part can differ; it must not.
    h = tmp_path / "tiny.yaml"
    h.write_text(TINY_HARNESS)
    a = run_job(_spec(h, 4, name="repro-a", seed=3), shared_home)
    b = run_job(_spec(h, 4, name="repro-b", seed=3), shared_home)
    ma, mb = _comparable(Path(a.run_dir)), _comparable(Path(b.run_dir))
    assert len(ma) >= 4 and ma == mb
    ra = read_rollouts(Path(a.run_dir)).drop(columns=["run_id"])
    rb = read_rollouts(Path(b.run_dir)).drop(columns=["run_id"])
    assert ra.equals(rb)
    # a different seed is a different run (the test above would pass on a job that ignores its seed otherwise)
    c = run_job(_spec(h, 4, name="repro-c", seed=4), shared_home)
    assert _comparable(Path(c.run_dir)) != ma


def test_a_fork_under_its_parents_harness_and_seed_trains_the_steps_one_longer_run_would(shared_home, tmp_path):
    """A campaign's mainline is a chain of such forks (a segment, then the next from its end): when nothing changes
    it must be the user's run, not a neighbouring path. The evaluations in between sample (pass@4) and must not
    move the run either: the longer run evaluates every 2 steps, the pieces only at their ends and starts."""
    h = tmp_path / "tiny.yaml"
    h.write_text(TINY_HARNESS)
    whole = run_job(_spec(h, 4, name="whole", seed=6, save_every=4, eval_every=2), shared_home)
    first = run_job(_spec(h, 2, name="piece1", seed=6, save_every=2, eval_every=1), shared_home)
    second = run_job(_spec(h, 2, name="piece2", seed=6, save_every=2, eval_every=2), shared_home, fork="piece1")
    other = run_job(_spec(h, 2, name="piece2-s7", seed=7, save_every=2, eval_every=2), shared_home, fork="piece1")

    def steps(run) -> list[dict]:  # the training rows (the evaluations differ in schedule on purpose), without the
        # Trainer's epoch, a fraction of each job's own dataset length
        return [{k: v for k, v in r.items() if k != "epoch"} for r in _comparable(Path(run.run_dir)) if "loss" in r]

    assert [r["step"] for r in steps(whole)] == [1, 2, 3, 4]
    assert steps(first) + steps(second) == steps(whole)
    from evotrainer.training.data import (
        STREAM_VERSION,  # what reusing a finished run must match (bench/campaign.py)
    )

    assert json.loads((Path(second.run_dir) / "meta.json").read_text())["data_stream"] == STREAM_VERSION == 2
    rollouts = [read_rollouts(Path(r.run_dir)).drop(columns=["run_id"]) for r in (whole, first, second)]
    pieces = pd.concat(rollouts[1:], ignore_index=True)
    assert pieces.equals(rollouts[0].reset_index(drop=True))
    # a fork of another seed draws its own prompts and samples: what makes paired backtest seeds independent
    assert steps(other) != steps(second)
    assert set(read_rollouts(Path(other.run_dir))["prompt_id"]) != set(rollouts[2]["prompt_id"])


def test_a_branch_that_died_after_resuming_from_its_pause_is_read_back_at_its_earlier_looks(first_run, shared_home,
                                                                                             tmp_path):
    """Found by bench/soak.py (owner and group kills): a branch paused at look 2, resumed for look 3 and killed
    before its next checkpoint keeps ``status: running`` with ``paused_at`` at look 2. The resumed backtest walks its
    looks again; it must read such a branch back at looks 1 and 2 (not ask the runner to train it to look 1, which
    the runner refuses), ledger each look once, and resume it only for look 3."""
    from evotrainer.agent.runs import JobAsk, _collect, _request
    from evotrainer.store import Store

    _, h = first_run
    for stop in (3, 4):
        res = run_job(_spec(h, 6, name="died", seed=3, save_every=1, eval_every=1), shared_home,
                      **({"fork": "first@2"} if stop == 3 else {"resume": "died"}), stop_at=stop)
        assert res.status == "paused"
    run_dir = Path(res.run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({**meta, "status": "running"}))  # resumed for look 3, then killed
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", {}, "t")
        ctx = small_context(store, home=shared_home)
        tags = {"evotrainer.role": "control"}
        for look in (3, 4):
            ask = JobAsk("died", HarnessSpec(), 6, 3, "first@2", 1, tags, look)
            assert _request(ctx, ask) is None
            got = _collect(ctx, ask, None)
            assert got.status == "finished" and got.step == look and got.eval_accuracy is not None, got
            assert got.checkpoint and got.checkpoint.endswith(f"checkpoint-{look}")
        assert [(e.key, e.steps) for e in store.ledger("c")] == [("died@3", 1), ("died@4", 1)]
    resumed = run_job(_spec(h, 6), shared_home, resume="died", stop_at=5)
    assert resumed.status == "paused" and json.loads((run_dir / "meta.json").read_text())["paused_at"] == 5


def test_a_paused_job_resumes_to_the_same_run_as_one_that_never_paused(first_run, shared_home, tmp_path):
    # Backtests train branches one look at a time (stop_at); pausing must change nothing about the run.
    _, h = first_run
    straight = run_job(_spec(h, 6, name="straight", seed=5, save_every=3, eval_every=3), shared_home, fork="first@2")
    legs = run_job(_spec(h, 6, name="legs", seed=5, save_every=3, eval_every=3), shared_home, fork="first@2", stop_at=5)
    run_dir = Path(legs.run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert legs.status == "paused" and meta["status"] == "paused" and meta["paused_at"] == 5
    assert max(complete_checkpoints(run_dir)) == 5
    assert eval_steps(run_dir) == [2, 5]  # the look (5) is on the job's own schedule (every 3 from 2): it has its evaluation
    assert [r["step"] for r in _comparable(run_dir) if "loss" in r] == [3, 4, 5]
    assert meta["mlflow_synced_step"] == 5  # a clean pause: MLflow holds every step up to it, and none after
    # killed right after it checkpointed at the look, before it recorded the pause (found by bench/soak.py: the
    # resumed backtest asked for the same look and the branch failed with 'stop_at=5 must lie after ... step 5');
    # a session that dies never leaves the clean pause's claim behind (it drops it when it starts)
    lines = (run_dir / "metrics.jsonl").read_text()
    died = {k: v for k, v in meta.items() if k not in ("paused_at", "mlflow_synced_step")}
    (run_dir / "meta.json").write_text(json.dumps({**died, "status": "running", "steps_done": 2}))
    again = run_job(_spec(h, 6), shared_home, resume="legs", stop_at=5)
    assert again.status == "paused" and again.steps_done == 5 and again.train_seconds == 0.0
    assert json.loads((run_dir / "meta.json").read_text())["paused_at"] == 5
    assert (run_dir / "metrics.jsonl").read_text() == lines  # nothing was trained again
    with pytest.raises(ConfigError, match="stop_at=4 must lie after the job's current step 5"):
        run_job(_spec(h, 6), shared_home, resume="legs", stop_at=4)
    done = run_job(_spec(h, 6), shared_home, resume="legs")
    assert done.status == "finished" and done.steps_done == 8
    done_meta = json.loads((run_dir / "meta.json").read_text())
    assert done_meta.get("paused_at") is None
    # each session that trained recorded its seconds (the resume that found its look done trained nothing)
    timings = done_meta["timings"]
    assert [(t["start_step"], t["steps_done"]) for t in timings] == [(2, 5), (5, 8)]
    assert all(t["wall_s"] >= t["setup_s"] + t["train_s"] - 0.02 and t["train_s"] >= t["eval_s"] > 0 for t in timings)
    # the set-up, part by part, adds up to it (rounding aside), the policy load and the trainer's build included
    parts = {"open", "policy", "rewards", "pool", "data", "tracking", "trainer"}
    assert all(set(t["setup_parts"]) == parts and abs(sum(t["setup_parts"].values()) - t["setup_s"]) < 0.05
               and t["setup_parts"]["policy"] > 0 and t["setup_parts"]["trainer"] > 0 for t in timings)
    assert gc.get_freeze_count() == 0  # the objects frozen for training are handed back to the collector
    assert _comparable(run_dir) == _comparable(Path(straight.run_dir))
    # a fork checkpoints and evaluates on its own interval (3), not its parent's (2), whose TrainerState it restores,
    # counted from its fork point (2 → 5 → 8), not from step 0 (3, 6: off the job's own steps)
    assert sorted(complete_checkpoints(Path(straight.run_dir))) == [2, 5, 8]
    assert eval_steps(Path(straight.run_dir)) == [2, 5, 8]  # its start (eval.at_start), then every 3 of its own steps
    # checkpoints keep the newest log_history row only (metrics.jsonl has every step), and a resume from them is
    # the run above step for step
    for ckpt in complete_checkpoints(run_dir).values():
        assert len(json.loads((ckpt / "trainer_state.json").read_text())["log_history"]) <= 1
    # a uniform harness reads no lineage pass rates (no data rule would use them)
    assert json.loads((run_dir / "data_report.json").read_text())["seen"] is None
    hist = _client(shared_home).get_metric_history(done.run_id, "loss")
    assert sorted(m.step for m in hist) == [3, 4, 5, 6, 7, 8]


def test_a_clean_pause_resumes_without_asking_mlflow_and_mlflow_gets_every_step_once(first_run, shared_home):
    """A session that paused cleanly records the last step MLflow holds; the next session trusts it instead of
    reading ~35 metric histories back (0.1 s a session, 2 s of a demo campaign), and MLflow still ends with each
    step once, as for a job that never paused."""
    _, h = first_run
    straight = run_job(_spec(h, 6, name="once", seed=6, save_every=3, eval_every=3), shared_home, fork="first@2")
    legs = run_job(_spec(h, 6, name="twice", seed=6, save_every=3, eval_every=3), shared_home, fork="first@2", stop_at=5)
    run_dir = Path(legs.run_dir)
    assert json.loads((run_dir / "meta.json").read_text())["mlflow_synced_step"] == 5
    assert not (run_dir / "trainer" / "README.md").exists()  # TRL's model card: only once the job has finished
    import evotrainer.core.tracking as tracking

    asked: list[str] = []
    real = tracking.Tracker.max_step
    tracking.Tracker.max_step = lambda self, rid, key: asked.append(key) or real(self, rid, key)
    try:
        done = run_job(_spec(h, 6), shared_home, resume="twice")
    finally:
        tracking.Tracker.max_step = real
    assert done.status == "finished" and asked == []
    assert "mlflow_synced_step" not in json.loads((run_dir / "meta.json").read_text())  # finished: nothing to resume
    assert "GRPO" in (run_dir / "trainer" / "README.md").read_text()
    client = _client(shared_home)
    for key in ("loss", "reward", "eval/greedy_accuracy"):
        got = sorted((m.step, m.value) for m in client.get_metric_history(done.run_id, key))
        want = sorted((m.step, m.value) for m in client.get_metric_history(straight.run_id, key))
        assert [st for st, _ in got] == [st for st, _ in want] and len(got) == len({st for st, _ in got})
    arts = {a.path for a in client.list_artifacts(done.run_id, "rollouts")}
    assert arts == {a.path for a in client.list_artifacts(straight.run_id, "rollouts")}


def test_a_checkpoint_its_job_never_acknowledged_is_trained_again_and_not_resumed_past_the_look(first_run,
                                                                                                 shared_home):
    """Found by the Ray campaign test in CI: a branch killed after the Trainer wrote its look's checkpoint and before
    the callback acknowledged it was resumed from that checkpoint with the same ``stop_at`` and trained one step past
    its look; the backtest ended at that look, so the step was never ledgered. Such a checkpoint is torn: the look's
    step is trained again from the last acknowledged checkpoint, up to the look and no further."""
    _, h = first_run
    res = run_job(_spec(h, 6, name="unacked", seed=7, save_every=1, eval_every=1), shared_home, fork="first@2",
                  stop_at=3)
    run_dir = Path(res.run_dir)
    assert res.status == "paused" and sorted(complete_checkpoints(run_dir)) == [2, 3]
    before = _comparable(run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    # as the kill left it: checkpoint-3 complete on disk, neither acknowledged nor recorded as the pause
    died = {k: v for k, v in meta.items() if k not in ("paused_at", "last_checkpoint_step")}
    (run_dir / "meta.json").write_text(json.dumps({**died, "status": "running", "steps_done": 2}))
    again = run_job(_spec(h, 6), shared_home, resume="unacked", stop_at=3)
    assert again.status == "paused" and again.steps_done == 3 and again.train_seconds > 0
    assert sorted(complete_checkpoints(run_dir)) == [2, 3]  # no checkpoint-4: nothing trained past the look
    assert [r["step"] for r in _comparable(run_dir) if "loss" in r] == [3]
    assert _comparable(run_dir) == before  # the same step again, from the same state
    assert json.loads((run_dir / "meta.json").read_text())["paused_at"] == 3


def test_a_job_told_to_exit_is_recorded_interrupted_and_resumes_to_its_target(first_run, shared_home):
    """A Ray worker whose campaign owner died is ended with SystemExit. That is a stop, not a failure: a failed
    branch is a final result, an interrupted one is resumed (found by the Ray campaign test)."""
    _, h = first_run

    def exit_at_3(step, _target, _last):
        if step == 3:
            raise SystemExit(1)

    with pytest.raises(SystemExit):
        run_job(_spec(h, 4, name="told-to-exit", seed=6), shared_home, progress=exit_at_3)
    run_dir = shared_home / "jobs" / "told-to-exit"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["error"] == "SystemExit: 1"
    done = run_job(_spec(h, 4), shared_home, resume="told-to-exit")
    assert done.status == "finished" and done.steps_done == 4


def test_a_fork_draws_its_pool_from_its_lineage_root_through_runs_recorded_without_pool_seed(tmp_path):
    """A merged run copies one source's spec (its seed) and records no pool_seed; older runs have none either.
    The walk goes up to the first run that names one, or to the root's own seed."""
    from evotrainer.jobs.lineage import lineage_pool_seed

    def write(name, seed, parent=None, **extra):
        d = tmp_path / "jobs" / name
        d.mkdir(parents=True)
        meta = {"name": name, "run_id": name, "spec": {"seed": seed}, "harness": {}, "target_step": 2,
                "start_step": 0, "base_policy": "", "parent_run": parent, **extra}
        (d / "meta.json").write_text(json.dumps(meta))
        return RunMeta.model_validate(meta)

    write("root", 3)  # recorded before pool_seed existed
    write("branch", 10021, "root", pool_seed=3)
    merged = write("merged", 10021, "branch")  # no pool_seed: walks to the branch
    assert lineage_pool_seed(tmp_path, merged) == 3
    old = write("old-branch", 10007, "root")  # an old fork: walks to the root's seed
    assert lineage_pool_seed(tmp_path, old) == 3
    orphan = write("orphan", 5, "gone")  # a parent that no longer exists: its own seed
    assert lineage_pool_seed(tmp_path, orphan) == 5


def test_a_branch_under_a_data_rule_reads_its_lineage_once_and_its_later_sessions_keep_those_statistics(
        first_run, shared_home, tmp_path):
    """A backtest branch under a data rule is resumed at every look, and its sibling seeds fork the same checkpoint;
    the lineage's pass statistics at a fork point never change, so the first session keeps them beside that
    checkpoint and every later one (a resume, a sibling) reads that one file, not the lineage's rollouts."""
    from evotrainer.evidence.model import prompt_pass_stats
    from evotrainer.jobs.lineage import PASS_STATS, ancestor_rollouts

    _, h = first_run
    rule = tmp_path / "rule.yaml"
    rule.write_text(TINY_HARNESS.replace("difficulty: [1, 1]}", "difficulty: [1, 1], drop_all_correct: true}"))
    legs = run_job(_spec(rule, 4, name="ruled", seed=8), shared_home, fork="first@2", stop_at=4)
    run_dir = Path(legs.run_dir)
    meta = read_run_meta(run_dir)
    kept = pd.read_parquet(Path(shared_home) / "jobs" / "first" / PASS_STATS.format(step=2))
    fresh = prompt_pass_stats(ancestor_rollouts(shared_home, meta))
    pd.testing.assert_frame_equal(kept.sort_values("prompt_id").reset_index(drop=True),
                                  fresh.sort_values("prompt_id").reset_index(drop=True), check_dtype=False)
    seen = json.loads((run_dir / "data_report.json").read_text())["seen"]
    assert seen is not None and seen > 0  # the rule met prompts its ancestor saw
    import evotrainer.jobs.lineage as lineage

    real, read = lineage.ancestor_rollouts, []
    lineage.ancestor_rollouts = lambda *a: read.append(a) or real(*a)
    try:
        done = run_job(_spec(rule, 4), shared_home, resume="ruled")
    finally:
        lineage.ancestor_rollouts = real
    assert done.status == "finished" and read == []  # the resumed session read the kept file only
    assert json.loads((run_dir / "data_report.json").read_text())["seen"] == seen
