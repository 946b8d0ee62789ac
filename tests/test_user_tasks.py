"""A user's own task with no code: dataset files read by ``datasets``, reasoning-gym generators, library verifiers.

Everything is built for real in ``tmp_path``: the files in each format, a verifier module, and short real jobs
(the nano policy here; SmolLM2 on Unicode prompts in tests/test_pretrained.py).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import datasets
import pandas as pd
import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.config.eval import EvalSpec
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec
from evotrainer.core.errors import ConfigError, TaskError
from evotrainer.tasks import get_task, normalize_task
from evotrainer.tasks.verifiers import VERIFIER_ERROR
from evotrainer.training.evaluation import SPLITS, split_problems

ROWS = [{"question": f"{a}+{b}=", "answer": str(a + b), "level": "easy" if a < 5 else "hard", "key": f"r{a}-{b}"}
        for a in range(20) for b in range(20)]
UNICODE = [{"q": f"Combien font {a} × {b} ?\nRéponds en chiffres — 数字で。", "a": str(a * b)}
           for a in range(20) for b in range(20)]


def _write(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "parquet":
        pd.DataFrame(rows).to_parquet(path)
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.fixture(params=["jsonl", "parquet", "csv", "disk"])
def any_format(request, tmp_path):
    fmt = request.param
    return _write(tmp_path / (f"d.{fmt}" if fmt != "disk" else "d"), UNICODE, fmt)


def test_every_format_gives_the_same_unicode_problems_and_disjoint_splits(any_format, tmp_path):
    ref = get_task(str(_write(tmp_path / "ref.jsonl", UNICODE, "jsonl")), {"prompt": "q", "answer": "a"})
    task = get_task(str(any_format), {"prompt": "q", "answer": "a", "verifier": "numeric"})
    assert sorted(p.id for p in task.problems) == sorted(p.id for p in ref.problems)  # ids: content hashes
    p = task.sample("train", 1, seed=0)[0]
    assert "\n" in p.prompt and "×" in p.prompt and "数字" in p.prompt
    assert task.verify(p, p.answer).correct and task.verify(p, f"C'est {p.answer}.").final_correct
    spec = EvalSpec(n=20)
    splits = {s: {q.id for q in split_problems(task, spec, s)} for s in SPLITS}
    train = {q.id for q in task.sample("train", 10_000, seed=3)}
    assert all(len(v) == 20 for v in splits.values())
    assert not (splits["decision"] & splits["selection"]) and not (splits["decision"] & splits["confirmation"])
    assert not (splits["selection"] & splits["confirmation"]) and not (train & set().union(*splits.values()))
    assert task.sample("train", 5, seed=1) == task.sample("train", 50, seed=1)[:5]  # prefix-consistent


def test_ids_levels_duplicates_and_chat_messages(tmp_path):
    rows = [*ROWS, ROWS[0], ROWS[1]]
    task = get_task(str(_write(tmp_path / "d.jsonl", rows, "jsonl")),
                    {"prompt": "question", "id": "key", "difficulty": "level", "system": "Réponds."})
    assert task.report["duplicates"] == 2 and len(task.problems) == len(ROWS)
    assert (task.min_difficulty, task.max_difficulty) == (1, 2) and task.default_range() == (1, 2)
    assert "easy=1, hard=2" in task.info().difficulty_doc
    p = next(q for q in task.problems if q.id == "r3-7")
    assert p.difficulty == 1 and task.chat_messages(p)[0] == {"role": "system", "content": "Réponds."}
    conv = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i}+1="}],
             "answer": str(i + 1)} for i in range(50)]
    chat = get_task(str(_write(tmp_path / "c.jsonl", conv, "jsonl")), {"prompt": "messages"})
    q = chat.problems[0]
    assert chat.chat_messages(q)[0]["content"] == "Be brief." and q.prompt == q.meta["messages"][-1]["content"]


def test_verifiers_exact_numeric_math_and_a_user_function(tmp_path, monkeypatch):
    from evotrainer.tasks import verifiers

    assert verifiers.exact(" 42 ", "42", {}).correct and not verifiers.exact("so 42", "42", {}).correct
    num = verifiers.numeric(1e-6)
    assert num("1,000", "1000", {}).correct and num("It is 0.5.", "0.5", {}).final_correct
    assert not num("0.51", "0.5", {}).correct
    m = verifiers.math_verify
    assert m("0.5", "\\frac{1}{2}", {}).correct  # math-verify: a decimal against a LaTeX fraction
    assert m("\\boxed{\\frac{1}{2}}", "0.5", {}).correct
    boxed = m("So the answer is $\\boxed{\\frac{2}{4}}$.", "1/2", {})
    assert boxed.final_correct and not boxed.correct  # right in prose, not the answer alone
    assert not m("\\frac{1}{3}", "0.5", {}).final_correct
    (tmp_path / "my_judges.py").write_text(textwrap.dedent("""
        def half(completion, row):
            return 1.0 if completion.strip() == row["answer"] else (0.5 if row["answer"] in completion else 0.0)
        def broken(completion, row):
            raise KeyError("nope")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    d = str(_write(tmp_path / "d.jsonl", ROWS, "jsonl"))
    task = get_task(d, {"prompt": "question", "verifier": "my_judges:half"})
    p = task.problems[0]
    assert task.verify(p, p.answer).correct and task.verify(p, f"x {p.answer}").score == 0.5
    bad = get_task(d, {"prompt": "question", "verifier": "my_judges:broken"}).verify(p, p.answer)
    assert not bad.correct and bad.reason.startswith(f"{VERIFIER_ERROR} KeyError")  # scored 0, the reason kept


def test_reasoning_gym_task_scores_with_its_own_scorer_and_follows_the_seed():
    name, opts = normalize_task({"reasoning_gym": "chain_sum", "config": {"max_terms": 3}}, None)
    task = get_task(name, opts)
    assert (task.min_difficulty, task.max_difficulty) == (1, 11)  # its curriculum's levels
    a, b = task.sample("train", 20, seed=0), task.sample("train", 20, seed=1)
    assert [p.id for p in a] != [p.id for p in b]
    p = a[0]
    assert task.verify(p, p.answer).correct and task.verify(p, p.answer).score == 1.0
    partial = task.verify(p, f"maybe {p.answer}")
    assert not partial.correct and 0 < partial.score < 1  # chain_sum's score_answer gives partial credit
    assert task.verify(p, f"<answer>{p.answer}</answer>").final_correct
    held = {q.id for q in task.sample("heldout", 50, seed=0)} | {q.id for q in task.sample("heldout", 50, seed=9)}
    assert not held & {q.id for q in task.sample("train", 500, seed=0)}
    lv = get_task("reasoning_gym", {"dataset": "gcd", "level_field": "min_value", "levels": [1, 10, 100]})
    assert lv.max_difficulty == 3 and lv.config_for(3).min_value == 100


def test_tasks_show_agrees_with_the_scorer_and_reports_splits(tmp_path):
    res = CliRunner().invoke(app, ["tasks", "show", "reasoning_gym", "--task-opt", "dataset=chain_sum",
                                   "--task-opt", 'config={"max_terms": 3}', "--eval-n", "30", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] and doc["splits"]["decision"] == 30 and doc["canonical_checked"] >= 200
    task = get_task("reasoning_gym", {"dataset": "chain_sum", "config": {"max_terms": 3}})
    for s in doc["samples"]:
        p = next(q for q in task.sample("train", 200, seed=0) if q.id == s["id"])
        assert task.verify(p, p.answer).score == s["canonical"]["score"] == 1.0
    d = _write(tmp_path / "d.csv", ROWS, "csv")
    res = CliRunner().invoke(app, ["tasks", "show", str(d), "--task-opt", "prompt=question", "--eval-n", "10", "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["rows"]["train"] + doc["rows"]["heldout"] == len(ROWS)
    assert doc["report"]["columns"] == ["question", "answer", "level", "key"]
    wrong = CliRunner().invoke(app, ["tasks", "show", str(d), "--task-opt", "prompt=question", "--task-opt",
                                     "answer=level", "--task-opt", "verifier=numeric", "--eval-n", "10", "--json"])
    assert wrong.exit_code == 1 and json.loads(wrong.stdout)["ok"] is False  # its own answers do not score 1


BAD = [
    ("missing.jsonl", {}, "does not exist"),
    ("d.jsonl", {"prompt": "nope"}, "prompt field 'nope' does not exist; its fields are: question, answer, level, key"),
    ("empty.jsonl", {}, "is empty"),
    ("latin1.jsonl", {"prompt": "question"}, "byte 17 is not UTF-8"),
    ("nulls.jsonl", {"prompt": "question"}, "2 of 402 rows have a null or empty 'question'.*skip_null=true"),
    ("d.jsonl", {"prompt": "question", "verifier": "no_such_mod_zz:fn"}, "importing module 'no_such_mod_zz' failed"),
]


@pytest.mark.parametrize("file,opts,message", BAD, ids=[b[2][:20] for b in BAD])
def test_bad_dataset_input_is_refused_with_exit_2_and_nothing_written(tmp_path, file, opts, message):
    _write(tmp_path / "d.jsonl", ROWS, "jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9", "answer": "1"}\n')
    _write(tmp_path / "nulls.jsonl", [*ROWS, {"question": None, "answer": "1"}, {"question": "", "answer": "2"}],
           "jsonl")
    with pytest.raises(TaskError, match=message):
        get_task(str(tmp_path / file), opts)
    home = tmp_path / "home"
    args = ["train", "--task", str(tmp_path / file), *sum((["--task-opt", f"{k}={v}"] for k, v in opts.items()), []),
            "--home", str(home), "--steps", "1", "--policy", "nano"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())
    if file == "nulls.jsonl":  # the option that skips them works
        assert len(get_task(str(tmp_path / file), {**opts, "skip_null": True}).problems) == len(ROWS)


def test_bad_reasoning_gym_input_names_what_is_valid():
    with pytest.raises(TaskError, match="no dataset 'chain_sumx'; its datasets are: .*chain_sum"):
        get_task("reasoning_gym", {"dataset": "chain_sumx"})
    with pytest.raises(TaskError, match="no config key 'digits'; its keys are: min_terms, max_terms"):
        get_task("reasoning_gym", {"dataset": "chain_sum", "config": {"digits": 3}})
    with pytest.raises(TaskError, match="refuses config"):
        get_task("reasoning_gym", {"dataset": "chain_sum", "config": {"min_terms": 5, "max_terms": 2}})


def test_a_dataset_too_small_for_eval_n_says_how_many_rows_each_split_gets(tmp_path):
    task = get_task(str(_write(tmp_path / "d.jsonl", ROWS[:100], "jsonl")), {"prompt": "question"})
    with pytest.raises(ConfigError, match=r"held-out rows \(and \d+ train\).*each gets at most \d+; eval.n=50"):
        split_problems(task, EvalSpec(n=50), "confirmation")


def test_the_character_level_policy_refuses_unicode_before_training(tmp_path, tiny_harness):
    from evotrainer.jobs.runner import run_job

    d = _write(tmp_path / "u.jsonl", UNICODE, "jsonl")
    spec = JobSpec(task=str(d), task_options={"prompt": "q", "answer": "a"}, harness=str(tiny_harness), steps=1,
                   policy=PolicySpec(size="nano"))
    with pytest.raises(TaskError, match=r"has '×' \(U\+00D7\) in its prompt.*'nano'.*smollm2-135m-instruct"):
        run_job(spec, tmp_path / "home")
    assert not (tmp_path / "home" / "jobs").exists() or not list((tmp_path / "home" / "jobs").iterdir())


def _job(task, opts, harness, home, name):
    from evotrainer.jobs.runner import run_job

    spec = JobSpec(task=task, task_options=opts, harness=str(harness), steps=2, seed=0, name=name,
                   policy=PolicySpec(size="nano", sft_steps=30, sft_target_accuracy=None), eval=EvalSpec(every=2, n=8, k=1, at_start=False))
    return run_job(spec, home)


def test_the_nano_policy_trains_on_a_dataset_and_a_reasoning_gym_task(tmp_path, shared_home):
    import pyarrow.parquet as pq

    (tmp_path / "h.yaml").write_text("name: t\noptim: {learning_rate: 0.001}\n"
                                     "grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}\n"
                                     "data: {pool_size: 64}\n")
    d = _write(tmp_path / "d.parquet", ROWS, "parquet")
    res = _job(str(d), {"prompt": "question", "verifier": "numeric"}, tmp_path / "h.yaml", shared_home, "ds-nano")
    assert res.steps_done == 2
    rows = pq.read_table(f"{res.run_dir}/rollouts").to_pandas()
    assert set(rows["prompt"]) <= {r["question"] for r in ROWS}
    assert "eval/greedy_accuracy" in res.metrics
    res = _job("reasoning_gym", {"dataset": "chain_sum", "config": {"max_terms": 2, "max_digits": 1}},
               tmp_path / "h.yaml", shared_home, "rg-nano")
    assert res.steps_done == 2 and "eval/greedy_accuracy" in res.metrics


def test_a_verifier_that_raises_scores_0_and_the_rollout_says_why(tmp_path, shared_home, monkeypatch):
    from evotrainer.evidence.model import read_rollouts

    (tmp_path / "evo_picky_judge_zz.py").write_text(
        "def judge(completion, row):\n"
        "    if len(completion) % 2:\n        raise RuntimeError('odd length')\n"
        "    return 1.0 if completion.strip() == row['answer'] else 0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "h.yaml").write_text("name: t\noptim: {learning_rate: 0.001}\n"
                                     "grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}\n"
                                     "data: {pool_size: 64}\n")
    d = _write(tmp_path / "d.jsonl", ROWS, "jsonl")
    res = _job(str(d), {"prompt": "question", "verifier": "evo_picky_judge_zz:judge"}, tmp_path / "h.yaml",
               shared_home, "picky-nano")
    rows = read_rollouts(Path(res.run_dir))
    odd = rows["completion"].str.len() % 2 == 1
    assert odd.any() and (rows.loc[odd, "verifier_error"] == f"{VERIFIER_ERROR} RuntimeError: odd length").all()
    assert (rows.loc[odd, "reward_correctness"] == 0).all() and rows.loc[~odd, "verifier_error"].isna().all()


REWARDS = '''
def digit_bonus(prompts, completions, completion_ids, question, **kwargs):
    assert len(question) == len(completions) and all(q.endswith("=") for q in question)  # the dataset's column
    assert kwargs["trainer_state"] is not None
    return [1.0 if any(ch.isdigit() for ch in c) else 0.0 for c in completions]

def fails_at_3(prompts, completions, completion_ids, trainer_state, **kwargs):
    if trainer_state.global_step + 1 == 3:
        raise ValueError("bad batch")
    return [0.0] * len(completions)

def too_few(prompts, completions, completion_ids, **kwargs):
    return [0.0]

def nan_out(prompts, completions, completion_ids, **kwargs):
    return [float("nan")] * len(completions)
'''


def _reward_job(tmp_path, home, fn, steps, name, module="evo_user_rewards_zz"):
    from evotrainer.jobs.runner import run_job

    (tmp_path / "h.yaml").write_text(
        "name: t\noptim: {learning_rate: 0.001}\n"
        "grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}\ndata: {pool_size: 64}\n"
        f"reward:\n  functions:\n    - {{fn: '{module}:{fn}', weight: 0.5}}\n")
    d = _write(tmp_path / "d.jsonl", ROWS, "jsonl")
    spec = JobSpec(task=str(d), task_options={"prompt": "question", "verifier": "numeric"},
                   harness=str(tmp_path / "h.yaml"), steps=steps, seed=0, name=name, save_every=1,
                   policy=PolicySpec(size="nano", sft_steps=30, sft_target_accuracy=None), eval=EvalSpec(every=0, n=8, k=1, at_start=False))
    return run_job(spec, home)


def test_a_user_reward_function_is_a_term_under_trls_name(tmp_path, shared_home, monkeypatch):
    from evotrainer.evidence.model import read_rollouts

    (tmp_path / "evo_user_rewards_zz.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = _reward_job(tmp_path, shared_home, "digit_bonus", 2, "user-reward")
    assert "rewards/digit_bonus/mean" in res.metrics
    rows = read_rollouts(Path(res.run_dir))
    assert set(rows["reward_digit_bonus"].dropna()) <= {0.0, 1.0} and rows["reward_digit_bonus"].notna().all()
    total = rows["reward_correctness"] * 1.0 + rows["reward_format"] * 0.1 + rows["reward_digit_bonus"] * 0.5
    assert (rows["reward"] - total).abs().max() < 1e-6  # the function's weighted values are in the reward
    from evotrainer.config.harness import HarnessSpec

    h = HarnessSpec.model_validate({"reward": {"functions": [{"fn": "evo_user_rewards_zz:digit_bonus", "weight": 0.5}]}})
    assert h.with_knob("reward.functions.digit_bonus.weight", 0.2).reward.functions["digit_bonus"].weight == 0.2
    from evotrainer.config.harness import locked_knob

    assert locked_knob("reward.functions.digit_bonus.fn") and not locked_knob("reward.functions.digit_bonus.weight")


@pytest.mark.parametrize("fn,message", [("fails_at_3", "fails_at_3 .* at step 3 raised ValueError: bad batch"),
                                         ("too_few", "too_few .* at step 1 returned 1 values for 16 completions"),
                                         ("nan_out", "nan_out .* at step 1 returned nan")])
def test_a_misbehaving_reward_function_fails_the_job_naming_it_and_the_step(tmp_path, shared_home, monkeypatch, fn,
                                                                          message):
    from evotrainer.core.errors import JobFailed

    (tmp_path / "evo_user_rewards_zz.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(JobFailed, match=message):
        _reward_job(tmp_path, shared_home, fn, 3, f"bad-reward-{fn}")
    run = shared_home / "jobs" / f"bad-reward-{fn}"
    if fn == "fails_at_3":  # what was checkpointed and recorded before the step stays
        assert (run / "trainer" / "checkpoint-2").is_dir()
        assert sorted(p.name for p in (run / "rollouts").glob("*.parquet"))[:2] == ["step_000001.parquet",
                                                                                   "step_000002.parquet"]


def test_a_reward_function_that_cannot_be_imported_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(TaskError, match="importing module 'evo_no_such_rewards_zz' failed"):
        _reward_job(tmp_path, tmp_path / "home", "x", 1, "never", module="evo_no_such_rewards_zz")
    assert not (tmp_path / "home" / "jobs").exists() or not list((tmp_path / "home" / "jobs").iterdir())


def test_a_campaign_over_a_dataset_task_runs_a_round_with_disjoint_splits(tmp_path):
    """A campaign spec whose task is a dataset file beside it (a relative path): one round end to end, and the rows it
    trained on, decided on, selected on and confirmed on are disjoint."""
    import yaml

    from evotrainer.agent.campaign import start_campaign
    from evotrainer.config.campaign import load_campaign_spec
    from evotrainer.evidence.model import read_rollouts
    from evotrainer.store import Store

    data = tmp_path / "data"
    data.mkdir()
    rows = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(40) for b in range(40)]
    _write(data / "sums.jsonl", rows, "jsonl")
    (tmp_path / "h.yaml").write_text("name: ds\noptim: {learning_rate: 0.001}\n"
                                     "grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 4}\n"
                                     "data: {pool_size: 64}\n")
    spec = {"name": "ds", "task": {"dataset": "data/sums.jsonl", "prompt": "question", "verifier": "numeric"},
            "policy": {"size": "nano", "sft_steps": 150, "sft_target_accuracy": None}, "harness": "h.yaml",
            "segment_steps": 2,
            "budget": {"total_steps": 12, "explore_share": 1.0, "final_share": 0.0},
            "backtest": {"branch_steps": 2, "seeds": 2, "max_proposals": 1, "looks": 1},
            "eval": {"every": 0, "n": 16, "k": 1}, "stop": {"plateau_rounds": 2}, "autonomy": "auto"}
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(spec))
    loaded = load_campaign_spec(tmp_path / "campaign.yaml")
    assert loaded.task == "dataset" and loaded.task_options["path"] == str(data / "sums.jsonl")  # beside the spec
    home = tmp_path / "home"
    cid = start_campaign(tmp_path / "campaign.yaml", home, log=lambda _m: None, max_rounds=1)
    store = Store.for_home(home)
    assert store.get_campaign(cid).status in ("finished", "stopped") and store.list_decisions(cid)  # max_rounds=1
    task = get_task(loaded.task, loaded.task_options)
    splits = {s: {p.prompt for p in split_problems(task, loaded.eval, s)} for s in SPLITS}
    trained = set()
    for run in {e.run_name for e in store.ledger(cid)}:
        trained |= set(read_rollouts(home / "jobs" / run)["prompt"])
    assert trained and all(not (trained & s) for s in splits.values())
    assert not (splits["decision"] & splits["selection"]) and not (splits["selection"] & splits["confirmation"])


def test_a_campaign_whose_warm_start_misses_its_target_fails_before_training_and_says_what_to_change(tmp_path):
    """A warm start that misses its probe target on every attempt is refused before any step of the budget is spent:
    the campaign ends ``failed`` (not ``finished``), ``campaign start`` exits 1, and the message names the fix."""
    import yaml

    from evotrainer.store import Store

    (tmp_path / "h.yaml").write_text("name: ws\ngrpo: {prompts_per_step: 4, num_generations: 4, "
                                     "max_completion_length: 4}\ndata: {pool_size: 64, difficulty: [1, 1]}\n")
    spec = {"name": "ws", "task": "arith", "harness": "h.yaml", "segment_steps": 2,
            "policy": {"size": "nano", "sft_steps": 5, "sft_target_accuracy": 0.95, "sft_restarts": 1},
            "budget": {"total_steps": 12, "explore_share": 1.0, "final_share": 0.0},
            "backtest": {"branch_steps": 2, "seeds": 2, "max_proposals": 1},
            "eval": {"every": 0, "n": 16, "k": 1}, "autonomy": "auto"}
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(spec))
    home = tmp_path / "home"
    res = CliRunner().invoke(app, ["campaign", "start", str(tmp_path / "campaign.yaml"), "--home", str(home)])
    assert res.exit_code == 1, res.output
    assert "WarmStartFailed" in res.output and "sft_target_accuracy" in res.output
    (camp,) = Store.for_home(home).list_campaigns()
    store = Store.for_home(home)
    assert camp.status == "failed" and sum(e.steps for e in store.ledger(camp.id)) == 0  # no step was spent
    again = CliRunner().invoke(app, ["campaign", "resume", camp.id, "--home", str(home)])
    assert again.exit_code == 1 and "failed" in again.output  # resuming says so; nothing runs
