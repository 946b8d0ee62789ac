"""A run's own names mapped onto the contract, and correctness found wherever other tools record it.

Each run here is laid out exactly as TRL 1.16 or verl write it (see tests/test_readers.py), with a reward that
rises while strict correctness does not: ``reward_hacking`` can only say so when the reader finds the strict
signal — a zero-weight reward function, a ``log_extra`` column, a ``log_metric`` metric, a verl
``reward_extra_info`` key, or a name the user gives — and must say "not enough evidence", naming what would
supply it, when there is none.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin import BUILTIN_DIAGNOSTICS
from evotrainer.evidence.mapping import FieldMap, as_bool, correctness_named, infer_reward_weights
from evotrainer.evidence.readers import load_evidence

STEPS, PROMPTS, GENS = 40, 4, 4


def hacked_trl_run(out: Path, funcs: dict[str, float], strict: str | None, extra: str | None = None,
                   metric: str | None = None, completions: bool = True) -> Path:
    """A TRL output dir: a lenient 0/1 reward rising 0.1 -> 0.9 while strict correctness stays at 0.125.

    ``funcs``: reward function -> weight ('lenient' is the rising one; ``strict``, when named, is a 0/1 function
    holding strict correctness); ``extra``: a log_extra column holding strict correctness; ``metric``: a
    log_metric metric holding its per-step mean."""
    rng = np.random.default_rng(0)
    hist = []
    (out / "completions").mkdir(parents=True, exist_ok=True)
    for step in range(1, STEPS + 1):
        t = (step - 1) / (STEPS - 1)
        n = PROMPTS * GENS
        ok = np.arange(n) < (1, 2, 3, 2, 2)[(step - 1) % 5]  # 2 of 16 on average, varying, no trend
        lenient = (ok | (rng.random(n) < 0.1 + 0.8 * t)).astype(float)
        values = {"lenient": lenient, strict: ok.astype(float)} if strict else {"lenient": lenient}
        values = {f: values[f] if f in values else (rng.random(n) < 0.5).astype(float) for f in funcs}
        reward = sum(w * values[f] for f, w in funcs.items())
        e = {"step": step, "loss": 0.0, "grad_norm": 1.0, "entropy": 0.5, "reward": float(reward.mean()),
             "reward_std": float(reward.std()), "frac_reward_zero_std": 0.2}
        for f in funcs:
            e[f"rewards/{f}/mean"] = float(values[f].mean())
            e[f"rewards/{f}/std"] = float(values[f].std())
        if metric:
            e[metric] = float(ok.mean())
        hist.append(e)
        if completions:
            table = {"step": [step] * n, "prompt": [f"q{step}-{i // GENS}" for i in range(n)],
                     "completion": [f"a{i}" for i in range(n)], **{f: values[f].tolist() for f in funcs}}
            if extra:
                table[extra] = ok.tolist()
            table["advantage"] = [0.0] * n
            pd.DataFrame(table).to_parquet(out / "completions" / f"completions_{step:05d}.parquet")
    state = {"global_step": STEPS, "max_steps": STEPS, "log_history": hist}
    (out / "trainer_state.json").write_text(json.dumps(state))
    return out


def hacking(ev) -> list:
    return BUILTIN_DIAGNOSTICS["reward_hacking"]().run(ev)


def flagged(findings) -> bool:
    return any(f.severity in ("warning", "critical") for f in findings)


def test_a_zero_weight_reward_function_is_the_correctness_signal(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0, "verifier": 0.0}, strict="verifier")
    ev = load_evidence(run)
    assert ev.meta["reward_weights"] == {"lenient": 1.0, "verifier": 0.0}  # solved from log_history
    r = ev.rollouts
    assert np.allclose(r["reward"], r["reward_lenient"])  # the monitor does not enter the reward
    assert ev.meta["correctness"]["rollout"]["source"] == "rollout column 'reward_verifier'"
    assert "zero-weight" in ev.meta["correctness"]["rollout"]["how"]
    assert (r["correct"] == (r["reward_verifier"] == 1.0)).all()
    assert flagged(hacking(ev))


def test_a_named_zero_weight_function_wins_over_a_named_weighted_one(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0, "accuracy_reward": 0.5, "exact_match": 0.0},
                         strict="exact_match")
    ev = load_evidence(run)
    how = ev.meta["correctness"]["rollout"]["how"]
    assert "'exact_match'" in how and "zero-weight" in how and "accuracy_reward" in how  # the other candidate named


def test_a_log_extra_column_is_the_correctness_signal(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0}, strict=None, extra="is_correct")
    ev = load_evidence(run)
    assert ev.meta["correctness"]["rollout"]["source"] == "rollout column 'is_correct'"
    assert "log_extra" in ev.meta["correctness"]["rollout"]["how"]
    assert flagged(hacking(ev))


def test_a_log_metric_metric_is_the_accuracy(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0}, strict=None, metric="exact_match", completions=False)
    ev = load_evidence(run)
    assert ev.meta["correctness"]["metric"]["source"] == "metric 'exact_match'"
    assert np.allclose(ev.metrics["accuracy"], ev.metrics["exact_match"])
    assert flagged(hacking(ev))


def test_a_verl_reward_extra_info_key_is_the_correctness_signal(tmp_path):
    rdir = tmp_path / "verl" / "rollouts"
    rdir.mkdir(parents=True)
    for step in (1, 2):
        recs = [{"input": f"q{i % 2}", "output": str(i), "gts": "1", "score": float(i % 3 == 0), "step": step,
                 "em": int(i == 0), "pred": str(i)} for i in range(6)]
        (rdir / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    ev = load_evidence(tmp_path / "verl")
    assert ev.meta["correctness"]["rollout"]["source"] == "rollout column 'em'"
    assert ev.rollouts["correct"].sum() == 2 and "pred" in ev.rollouts  # other keys kept under their names


def test_no_signal_is_not_enough_evidence_naming_what_would_supply_it(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0}, strict=None, extra="judge_ok")
    ev = load_evidence(run)
    assert ev.meta["correctness"] is None and "--correctness NAME" in ev.meta["correctness_missing"]
    [f] = hacking(ev)
    assert Diagnostic.insufficient(f) and "--correctness NAME" in f.explanation
    # named by the user, by --correctness, a --map entry or a map file, the same column decides
    for fmap in (FieldMap(correctness="judge_ok"), FieldMap(map={"correct": "judge_ok"})):
        mapped = load_evidence(run, fields=fmap)
        assert mapped.meta["correctness"]["rollout"]["how"] == "mapped by the user"
        assert mapped.meta["mapped"] == ["rollout 'correct' <- column 'judge_ok'"]
        assert flagged(hacking(mapped))


def test_diagnose_cli_map_options_and_report(tmp_path):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0}, strict=None, extra="judge_ok")
    r = CliRunner().invoke(app, ["diagnose", str(run), "--only", "reward_hacking"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "no strict-correctness signal" in r.stdout and "not enough evidence for: reward_hacking" in r.stdout
    mapfile = tmp_path / "map.yaml"
    mapfile.write_text("map:\n  correct: judge_ok\n")
    for opts in (["--correctness", "judge_ok"], ["--map", "correct=judge_ok"], ["--map-file", str(mapfile)]):
        r = CliRunner().invoke(app, ["diagnose", str(run), "--only", "reward_hacking", "--json", *opts])
        doc = json.loads(r.stdout)
        assert r.exit_code == 0, r.output
        # v3: the reward is the `lenient` function's alone, so the gap rule reads it, and a 0.6 gap is critical
        assert [f["severity"] for f in doc["findings"]] == ["critical"], opts
        assert "rewards/lenient/mean" in doc["findings"][0]["explanation"]
        assert doc["evidence"]["correctness"]["rollout"]["how"] == "mapped by the user"


@pytest.mark.parametrize("opts,message", [
    (["--map", "correctt=judge_ok"], "'correctt' is not a field of the evidence contract"),
    (["--map", "correct"], "write FIELD=NAME"),
    (["--map", "correct=nope"], "no rollout column, reward function or metric 'nope'"),
    (["--map", "correct=prompt"], "must hold booleans or 0/1"),
    (["--map", "metric:truncated=x"], "'truncated' is not a metric field"),
])
def test_bad_maps_exit_2_saying_what_is_allowed(tmp_path, opts, message):
    run = hacked_trl_run(tmp_path / "trl", {"lenient": 1.0}, strict=None, extra="judge_ok")
    r = CliRunner().invoke(app, ["diagnose", str(run), *opts], env={"COLUMNS": "300"})
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output


def test_map_file_is_read_by_the_safe_loader(tmp_path):
    bad = tmp_path / "map.yaml"
    bad.write_text("map:\n  correct: a\n  correct: b\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        FieldMap.load(bad)
    bad.write_text("maps:\n  correct: a\n")
    with pytest.raises(ConfigError, match="unknown key"):
        FieldMap.load(bad)


def test_columns_read_as_correctness_only_when_every_value_is_a_truth_value():
    def read(values, dtype=None):
        b = as_bool(pd.Series(values, dtype=dtype, name="c"))
        return None if b is None else [None if pd.isna(v) else bool(v) for v in b]

    # numbers (a reward function's column): 0/1 with gaps read, anything else does not
    assert read([1.0, 0.0, np.nan]) == [True, False, None]
    assert read([1, 0, 1]) == [True, False, True]
    assert read([1, 0, None], "Int64") == [True, False, None]
    assert read([np.nan, np.nan]) is None and read([0.5, 1.0]) is None and read([2, 1]) is None
    assert read([1.0, -0.0]) == [True, False]
    # booleans and words
    assert read([True, False]) == [True, False]
    assert read(["true", " False", None]) == [True, False, None]
    assert read(["yes", "no"]) is None and read([[1], [0]], object) is None
    assert as_bool(pd.Series([1.0, 0.0], index=[7, 9], name="c")).index.tolist() == [7, 9]


def test_names_that_read_as_correctness():
    for yes in ("correct", "is_correct", "acc", "exact_match", "accuracy_reward", "rewards/em/mean", "Solved"):
        assert correctness_named(yes), yes
    for no in ("incorrect", "not_correct", "acc_std", "accent", "format", "judge_ok", "precision"):
        assert not correctness_named(no), no


def test_weights_are_left_unknown_unless_identified():
    m = pd.DataFrame({"step": [1, 2, 3, 4], "reward": [0.5] * 4, "rewards/a/mean": [0.25] * 4})
    assert infer_reward_weights(m, ["a"]) is None  # constant means: any weight fits as well
    m = pd.DataFrame({"step": [1, 2, 3, 4], "reward": [0.1, 0.3, 0.2, 0.4], "rewards/a/mean": [0.1, 0.3, 0.2, 0.4],
                      "rewards/b/mean": [0.5, 0.1, 0.9, 0.3]})
    assert infer_reward_weights(m, ["a", "b"]) == {"a": 1.0, "b": 0.0}
    m["reward"] = m["reward"] + [0.0, 0.01, 0.0, 0.0]  # not a weighted sum: no weights
    assert infer_reward_weights(m, ["a", "b"]) is None
