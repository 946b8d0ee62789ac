"""Readers: directories laid out exactly as TRL 1.16, verl and EvoTrainer write them, and an MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evotrainer.core.errors import RunNotFound
from evotrainer.evidence.model import ROLLOUT_SCHEMA
from evotrainer.evidence.readers import load_evidence, read_trl_dir, read_verl_dir


# ------------------------------------------------------------------------------------------ TRL layout
def write_trl_completions(out: Path, step: int, prompts, completions, rewards: dict, extra: dict, adv) -> Path:
    """The same table GRPOTrainer.log builds (trl 1.16), written the same way."""
    (out / "completions").mkdir(parents=True, exist_ok=True)
    table = {
        "step": [step] * len(prompts),
        "prompt": prompts,
        "completion": completions,
        **rewards,
        **extra,
        "advantage": adv,
    }
    path = out / "completions" / f"completions_{step:05d}.parquet"
    pd.DataFrame(table).to_parquet(path)
    return path


def write_trainer_state(path: Path, reward_names: list[str], steps: int, eval_step: int | None = None) -> None:
    """trainer_state.json as TrainerState.save_to_json writes it, with a realistic GRPO log_history."""
    hist = []
    for s in range(1, steps + 1):
        e = {"clip_ratio/high_max": 0.0, "clip_ratio/region_mean": 0.01, "completions/clipped_ratio": 0.25,
             "completions/mean_length": 12.5, "entropy": 0.9 - 0.1 * s, "epoch": s / 10, "frac_reward_zero_std": 0.5,
             "grad_norm": 1.5, "kl": 0.0, "learning_rate": 1e-5, "loss": 0.01 * s, "num_tokens": 100.0 * s,
             "reward": 0.5, "reward_std": 0.3, "step": s, "step_time": 2.0}
        for n in reward_names:
            e[f"rewards/{n}/mean"] = 0.25
            e[f"rewards/{n}/std"] = 0.1
        hist.append(e)
        if s == eval_step:
            hist.append({"epoch": s / 10, "eval_loss": 0.2, "eval_reward": 0.75, "eval_runtime": 1.2,
                         "eval_samples_per_second": 10.0, "eval_steps_per_second": 1.0, "step": s})
    hist.append({"epoch": steps / 10, "step": steps, "total_flos": 0.0, "train_loss": 0.02, "train_runtime": 30.1,
                 "train_samples_per_second": 1.0, "train_steps_per_second": 0.1})
    state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None, "epoch": steps / 10,
             "eval_steps": 500, "global_step": steps, "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": hist, "logging_steps": 1, "max_steps": steps,
             "num_input_tokens_seen": 0, "num_train_epochs": 1, "save_steps": 10, "stateful_callbacks": {},
             "total_flos": 0.0, "train_batch_size": 6, "trial_name": None, "trial_params": None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


def _two_groups(step: int):
    prompts = [f"Q{step}a"] * 3 + [f"Q{step}b"] * 3
    completions = [f"answer {i}" for i in range(6)]
    return prompts, completions


def test_trl_state_in_latest_checkpoint_groups_rewards_and_correct(tmp_path):
    out = tmp_path / "trl_out"
    write_trainer_state(out / "checkpoint-9" / "trainer_state.json", ["accuracy_reward", "format_reward"], 9)
    write_trainer_state(out / "checkpoint-10" / "trainer_state.json", ["accuracy_reward", "format_reward"], 10,
                        eval_step=10)
    for step in (9, 10):
        p, c = _two_groups(step)
        write_trl_completions(out, step, p, c,
                              {"accuracy_reward": [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
                               "format_reward": [0.5, 0.5, 0.0, 0.5, 0.0, 0.5]},
                              {}, [0.5, -0.5, 0.5, 0.1, -0.2, 0.1])
    ev = load_evidence(out)
    assert ev.source == "trl"
    assert ev.meta["trainer_state"].endswith("checkpoint-10/trainer_state.json")  # numeric, not lexical
    assert ev.meta["reward_functions"] == ["accuracy_reward", "format_reward"]
    r = ev.rollouts
    assert len(r) == 12
    assert list(r["group_id"][:6]) == ["9:0"] * 3 + ["9:1"] * 3
    assert list(r["group_id"][6:]) == ["10:0"] * 3 + ["10:1"] * 3
    assert r.groupby("group_id")["prompt_id"].nunique().eq(1).all()
    assert r["prompt_id"].nunique() == 4
    assert list(r["reward"][:6]) == [1.5, 0.5, 1.0, 0.5, 0.0, 0.5]  # unweighted sum of the reward columns
    assert list(r["reward_format_reward"][:3]) == [0.5, 0.5, 0.0]
    assert list(r["correct"][:3]) == [True, False, True]  # accuracy_reward holds only 0/1
    assert list(r["advantage"][:2]) == [0.5, -0.5]
    assert "length" not in r and "truncated" not in r
    m = ev.metrics
    assert list(m["step"]) == list(range(1, 11))
    assert "train_runtime" not in m and "train_loss" not in m  # the final summary entry is dropped
    assert m.loc[m["step"] == 10, "eval_reward"].item() == 0.75  # eval entry merged under its own keys
    assert {"loss", "rewards/accuracy_reward/mean", "completions/clipped_ratio", "entropy"} <= set(m.columns)


def test_trl_top_level_state_conversational_no_correct(tmp_path):
    out = tmp_path / "trl_chat"
    write_trainer_state(out / "trainer_state.json", ["len_penalty"], 2)
    write_trainer_state(out / "checkpoint-1" / "trainer_state.json", ["len_penalty"], 1)
    sys_msg = {"role": "system", "content": "Answer briefly."}
    prompts = [[sys_msg, {"role": "user", "content": "2+2?"}]] * 2 + [[sys_msg, {"role": "user", "content": "3+3?"}]] * 2
    completions = [[{"role": "assistant", "content": t}] for t in ("4", "5", "6", "6")]
    write_trl_completions(out, 2, prompts, completions, {"len_penalty": [0.1, 0.2, 0.3, 0.4]},
                          {"length": [3, 4, 5, 6]}, [0.0] * 4)
    ev = read_trl_dir(out)
    assert ev.meta["trainer_state"] == str(out / "trainer_state.json")
    r = ev.rollouts
    assert r["prompt"][0] == "system: Answer briefly.\nuser: 2+2?"
    assert list(r["completion"]) == ["4", "5", "6", "6"]
    assert list(r["group_id"]) == ["2:0", "2:0", "2:1", "2:1"]
    assert "correct" not in r  # no 0/1 correctness reward, no correct column: not derivable
    assert list(r["length"]) == [3, 4, 5, 6]
    assert r["reward"].round(3).tolist() == [0.1, 0.2, 0.3, 0.4]
    assert list(ev.metrics["step"]) == [1, 2]


def test_trl_extra_correct_column_and_corrupt_file_skipped(tmp_path):
    out = tmp_path / "trl_extra"
    write_trainer_state(out / "checkpoint-2" / "trainer_state.json", ["score"], 2)
    write_trl_completions(out, 1, ["p", "p"], ["a", "b"], {"score": [0.3, 0.9]},
                          {"correct": [False, True], "truncated": [True, False]}, [-1.0, 1.0])
    bad = out / "completions" / "completions_00002.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    ev = load_evidence(out)
    assert list(ev.rollouts["correct"]) == [False, True]
    assert list(ev.rollouts["truncated"]) == [True, False]
    assert len(ev.rollouts) == 2
    assert len(ev.meta["skipped"]) == 1 and ev.meta["skipped"][0].startswith(str(bad))


# ----------------------------------------------------------------------------------------- verl layout
def _verl_record(step, prompt, output, score, **extra):
    # RayPPOTrainer._dump_generations: input, output, gts, score, step, then reward_extra_info keys
    return {"input": prompt, "output": output, "gts": "4", "score": score, "step": step, **extra}


def write_verl_run(root: Path, with_acc: bool) -> None:
    rdir = root / "rollouts"
    rdir.mkdir(parents=True)
    for step in (1, 2):
        # balance_batch reorders the batch before the dump: a group's rows are not consecutive
        rows = [("user: 2+2?", "4", 1.0), ("user: 3+3?", "5", 0.0), ("user: 2+2?", "5", 0.0),
                ("user: 3+3?", "6", 1.0)]
        lines = [json.dumps(_verl_record(step, p, o, s, **({"acc": bool(s), "pred": o} if with_acc else {})),
                            ensure_ascii=False) for p, o, s in rows]
        (rdir / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    (root / "val").mkdir()
    (root / "val" / "2.jsonl").write_text(json.dumps(_verl_record(2, "val prompt", "x", 1.0)) + "\n")
    metrics = [
        {"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.1}},
        *[{"step": s, "data": {"critic/score/mean": 0.5, "critic/score/max": 1.0, "critic/rewards/mean": 0.45,
                               "actor/entropy": 1.2, "actor/kl_loss": 0.01, "actor/ppo_kl": 0.002,
                               "actor/pg_loss": -0.1, "actor/grad_norm": 0.8, "actor/pg_clipfrac": 0.03,
                               "actor/lr": 1e-6, "response_length/mean": 100.0, "response_length/clip_ratio": 0.1,
                               "timing_s/step": 12.0, "perf/throughput": 900.0}} for s in (1, 2)],
    ]
    text = "\n".join(json.dumps(m) for m in metrics)
    (root / "metrics.jsonl").write_text(text[: text.rfind("\n")] + "\n{\"step\": 2, \"data\": {tor\n")  # torn line


def test_verl_dir_mapping_groups_and_correct(tmp_path):
    root = tmp_path / "verl_run"
    write_verl_run(root, with_acc=True)
    ev = load_evidence(root)
    assert ev.source == "verl"
    m = ev.metrics.set_index("step")
    assert list(m.index) == [0, 1]  # the torn step-2 line is skipped
    assert any("metrics.jsonl:3: malformed JSON" in s for s in ev.meta["skipped"])
    row = m.loc[1]
    assert row["reward"] == 0.5 and row["entropy"] == 1.2 and row["kl"] == 0.01
    assert row["grad_norm"] == 0.8 and row["clip_ratio/region_mean"] == 0.03 and row["policy_loss"] == -0.1
    assert row["completions/mean_length"] == 100.0 and row["completions/clipped_ratio"] == 0.1
    assert row["learning_rate"] == 1e-6 and row["step_time"] == 12.0
    assert row["actor/ppo_kl"] == 0.002 and row["critic/rewards/mean"] == 0.45  # not TRL quantities: kept
    assert "critic/score/mean" not in m and "actor/entropy" not in m
    r = ev.rollouts
    assert len(r) == 8 and ev.meta["rollout_dir"] == str(root / "rollouts")  # val/ dumps are not rollouts
    assert list(r["group_id"][:4]) == ["1:0", "1:1", "1:0", "1:1"]
    assert list(r["reward"][:4]) == [1.0, 0.0, 0.0, 1.0]
    assert list(r["correct"][:4]) == [True, False, False, True]
    assert r["prompt"][0] == "user: 2+2?" and r["completion"][0] == "4"


def test_verl_without_acc_has_no_correct(tmp_path):
    root = tmp_path / "verl_plain"
    write_verl_run(root, with_acc=False)
    ev = read_verl_dir(root)
    assert "correct" not in ev.rollouts
    assert ev.rollouts["reward"].notna().all()


# ------------------------------------------------------------------------------------ errors, own jobs
def test_unknown_dir_and_unknown_ref(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunNotFound) as e:
        load_evidence(empty)
    assert str(empty) in str(e.value) and "trainer_state.json" in str(e.value) and "{step}.jsonl" in str(e.value)
    with pytest.raises(RunNotFound) as e:
        read_trl_dir(empty)
    assert "completions/completions_*.parquet" in str(e.value)
    with pytest.raises(RunNotFound) as e:
        load_evidence("no-such-run", home=tmp_path / "home")
    assert "no-such-run" in str(e.value) and "MLflow run id" in str(e.value)


def _write_job(home: Path, name: str, run_id: str) -> Path:
    d = home / "jobs" / name
    (d / "rollouts").mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"name": name, "run_id": run_id}))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in (1, 2)))
    rows = [{"run_id": run_id, "step": 1, "prompt_id": "p1", "group_id": "1:0", "prompt": "q", "completion": c,
             "reward": float(i), "correct": bool(i)} for i, c in enumerate(["a", "b"])]
    df = pd.DataFrame(rows)
    for col in ROLLOUT_SCHEMA.names:
        if col not in df:
            df[col] = None
    pq.write_table(pa.Table.from_pandas(df[ROLLOUT_SCHEMA.names], schema=ROLLOUT_SCHEMA, preserve_index=False),
                   d / "rollouts" / "step_000001.parquet")
    return d


def test_own_job_dir_round_trip(tmp_path):
    home = tmp_path / "home"
    d = _write_job(home, "arith__base__s0__t", "ab" * 16)
    for ref, h in ((d, None), ("arith__base__s0__t", home), ("ab" * 16, home)):
        ev = load_evidence(ref, home=h)
        assert ev.source == "evotrainer" and ev.run == "arith__base__s0__t"
        assert list(ev.metrics["step"]) == [1, 2]
        assert list(ev.rollouts["correct"]) == [False, True]
        assert list(ev.rollouts.columns) == ROLLOUT_SCHEMA.names
    (d / "rollouts" / "step_000002.parquet").write_bytes(b"garbage")
    ev = load_evidence(d)
    assert len(ev.rollouts) == 2 and "step_000002.parquet" in ev.meta["skipped"][0]


def test_mlflow_run_id_without_job_dir(tmp_path, monkeypatch):
    from evotrainer.core.tracking import Tracker

    monkeypatch.delenv("EVOTRAINER_MLFLOW_URI", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    tracker = Tracker(home)
    run_id = tracker.create_run("remote-run", {"evotrainer.role": "test"})
    for s in (1, 2, 3):
        tracker.log_metrics(run_id, s, {"reward": s / 10, "entropy": 1.0 - s / 10, "eval/pass@4": 0.5})
    src = _write_job(tmp_path / "elsewhere", "remote-run", run_id) / "rollouts" / "step_000001.parquet"
    tracker.log_artifact(run_id, src, "rollouts")
    tracker.end_run(run_id, "FINISHED")
    assert not (home / "jobs").exists()
    ev = load_evidence(run_id, home=home)
    assert ev.source == "mlflow" and ev.run == "remote-run" and ev.meta["run_id"] == run_id
    assert list(ev.metrics["step"]) == [1, 2, 3]
    assert ev.metrics["reward"].round(3).tolist() == [0.1, 0.2, 0.3]
    assert "eval/pass_at_4" in ev.metrics
    assert len(ev.rollouts) == 2 and list(ev.rollouts["correct"]) == [False, True]
    with pytest.raises(RunNotFound):
        load_evidence("0" * 32, home=home)
