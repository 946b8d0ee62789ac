"""EvoTrainerCallback inside plain TRL scripts written here (not through our runner): tiny model, 2-4 steps.

The first job's policy reward is constant, so every GRPO group is dead (a critical finding at step 1), and a
zero-weight 0/1 reward function ``exact_match`` is its strict correctness: the callback must record the rollouts
in our schema with that correctness, diagnose, log the finding to the active MLflow run and stop training. The
second is left to run: every step is recorded, diagnosed every 2 steps, and the directory reads like our jobs.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.core.errors import ConfigError
from evotrainer.evidence.readers import load_evidence
from evotrainer.monitor.callback import EvoTrainerCallback
from evotrainer.training.policy import build_model, build_tokenizer

PROMPTS = ["1+1=", "0+2=", "2+0=", "1+0="]


def constant(completions, **kw):
    return [1.0 for _ in completions]


def exact_match(completions, **kw):
    return [1.0 if c.strip() == "2" else 0.0 for c in completions]


def brevity(completions, **kw):
    return [-len(c) / 4 for c in completions]


def trainer(out, rewards, weights, callbacks, steps):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = build_tokenizer()
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                      bf16=False, disable_tqdm=True, reward_weights=weights, seed=0)
    return GRPOTrainer(model=build_model("nano", tok), reward_funcs=rewards, args=args, processing_class=tok,
                       train_dataset=Dataset.from_dict({"prompt": PROMPTS * 8}), callbacks=callbacks)


def test_callback_records_diagnoses_logs_to_mlflow_and_stops(tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    cb = EvoTrainerCallback(every=1, stop_on="gate", harness=None, diagnostics=None)
    cb_critical = EvoTrainerCallback(out_dir=tmp_path / "second", every=1, stop_on="critical")
    t = trainer(tmp_path / "out", [constant, exact_match], [1.0, 0.0], [cb, cb_critical], steps=4)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        exp = mlflow.create_experiment("callback", artifact_location=(tmp_path / "artifacts").as_uri())
        with mlflow.start_run(experiment_id=exp) as run:
            t.train()
    finally:
        mlflow.set_tracking_uri(previous)
    # the gate (no dead_groups in it) did not stop; "critical" did, at the first step, on dead groups
    assert t.state.global_step == 1 and cb_critical.stopped_by.symptom == "dead_groups"
    assert cb.stopped_by is None
    meta = json.loads((tmp_path / "second" / "meta.json").read_text())
    assert meta["status"] == "stopped" and meta["stopped_by"]["finding"]["severity"] == "critical"
    assert meta["reward_weights"] == {"constant": 1.0, "exact_match": 0.0}
    assert "zero-weight" in meta["correctness_found"]["how"] and meta["correctness_found"]["source"] == "reward_exact_match"
    # our schema, read back like one of our jobs
    out = tmp_path / "out" / "evotrainer"
    ev = load_evidence(out)
    r = ev.rollouts
    assert ev.source == "evotrainer" and len(r) == 8 and set(r["step"]) == {1}
    assert (r["reward"] == 1.0).all() and r.groupby("group_id").size().tolist() == [4, 4]
    assert r["correct"].notna().all() and r.groupby("group_id")["prompt"].nunique().eq(1).all()
    m = pd.read_json(out / "metrics.jsonl", lines=True)
    assert m["frac_reward_zero_std"].iloc[0] == 1.0 and "accuracy" in m
    # the finding went to the active MLflow run: a metric at its step and the findings as a JSON artifact
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    hist = client.get_metric_history(run.info.run_id, "evotrainer/dead_groups")
    assert [(h.step, h.value) for h in hist[:1]] == [(1, 2.0)]
    arts = [a.path for a in client.list_artifacts(run.info.run_id, "evotrainer/findings")]
    assert arts == ["evotrainer/findings/step_000001.json"]
    # the CLI diagnoses the directory
    res = CliRunner().invoke(app, ["diagnose", str(out), "--json", "--fail-on", "critical"])
    assert res.exit_code == 1 and "dead_groups" in {f["symptom"] for f in json.loads(res.stdout)["findings"]}


def test_callback_left_to_run_records_every_step(tmp_path):
    cb = EvoTrainerCallback(every=2, correctness="exact_match")
    t = trainer(tmp_path / "out", [brevity, exact_match], [1.0, 1.0], [cb], steps=3)
    t.train()
    assert t.state.global_step == 3 and cb._diagnosed_at == 3  # at steps 2 and 3 (the end)
    out = tmp_path / "out" / "evotrainer"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["steps_done"] == 3
    assert meta["correctness_found"] == {"source": "reward_exact_match", "how": "named by correctness="}
    assert sorted(p.name for p in (out / "rollouts").glob("*.parquet")) == [f"step_00000{i}.parquet" for i in (1, 2, 3)]
    ev = load_evidence(out)
    r = ev.rollouts
    assert (abs(r["reward"] - (-r["completion"].str.len() / 4 + r["correct"].astype(float))) < 1e-6).all()
    assert sorted(ev.metrics["step"]) == [1, 2, 3]


def test_callback_arguments_are_checked():
    with pytest.raises(ConfigError, match="every"):
        EvoTrainerCallback(every=0)
    with pytest.raises(ConfigError, match="stop_on"):
        EvoTrainerCallback(stop_on="error")
    with pytest.raises(ConfigError, match="unknown diagnostic 'dead_group'"):
        EvoTrainerCallback(diagnostics=["dead_group"])


def test_the_diagnosis_cadence_stretches_to_keep_its_share_of_training_time_under_max_overhead(tmp_path, monkeypatch):
    """A fake clock: steps of 1 s, a diagnosis of 0.5 s. Uncapped, every=2 diagnoses 15 times in 30 steps; with
    max_overhead=0.05 each waits ceil(0.5 / (0.05 * 1)) = 10 steps, so the diagnosis's share stays at 5 %."""
    import types

    import evotrainer.monitor.callback as module

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    def run(cap):
        # the capped run also writes on the training thread: each step's file is there when on_step_end returns
        cb = EvoTrainerCallback(out_dir=tmp_path / f"cap{cap}", every=2, max_overhead=cap, mlflow=False,
                                background_writes=cap is None)
        real = cb.registry.run

        def slow(*a, **kw):
            clock.now += 0.5
            return real(*a, **kw)

        cb.registry.run = slow
        cb.trainer = types.SimpleNamespace(reward_func_names=["exact_match"], reward_weights=None, num_generations=4)
        args = types.SimpleNamespace(output_dir=str(tmp_path / f"out{cap}"), logging_strategy="no")
        state = types.SimpleNamespace(global_step=0, max_steps=30)
        control = types.SimpleNamespace(should_training_stop=False)
        cb.on_train_begin(args, state, control)
        for step in range(1, 31):
            clock.now += 1.0
            completions = [str(step % 3)] * 4 + ["2"] * 4
            cb.trainer._logs = {"prompt": PROMPTS[:2] * 4, "completion": completions, "advantages": [0.0] * 8,
                                "rewards": {"exact_match": exact_match(completions)}, "extra": {}}
            state.global_step = step
            cb.on_step_end(args, state, control)
            if cap is not None:
                assert (tmp_path / f"cap{cap}" / "rollouts" / f"step_{step:06d}.parquet").is_file()
        cb.on_train_end(args, state, control)
        return cb

    uncapped = run(None)
    assert [s for s, _ in uncapped.diagnoses] == list(range(2, 31, 2))
    capped = [s for s, _ in run(0.05).diagnoses]
    assert capped[:2] == [2, 12] and capped[-1] == 30  # the end is always diagnosed
    assert all(b - a >= 10 for a, b in zip(capped, capped[1:-1]))
    # each diagnosis joined only what came since the last one, and saw every rollout recorded, in order
    ev = uncapped.evidence()
    assert len(uncapped.frames) == 1 and len(ev.rollouts) == 30 * 8
    assert ev.rollouts["step"].tolist() == [s for s in range(1, 31) for _ in range(8)]
    assert ev.rollouts["correct"].tolist()[:8] == [False] * 4 + [True] * 4
    # a diagnostic that writes into its evidence changes no recorded frame
    ev.rollouts["correct"] = False
    ev.rollouts["scratch"] = 1
    again = uncapped.evidence().rollouts
    assert "scratch" not in again and again["correct"].sum() == 30 * 4 + 10 * 4  # "2" at steps 2, 5, ..., 29 too


def test_max_overhead_is_checked():
    for bad in (0, -0.1, 1.5, True, "2%"):
        with pytest.raises(ConfigError, match="max_overhead"):
            EvoTrainerCallback(max_overhead=bad)
