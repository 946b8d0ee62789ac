"""The TRL reader against a directory written by TRL itself (plain GRPOTrainer, log_completions=True)."""

from __future__ import annotations

from evotrainer.evidence.readers import load_evidence
from evotrainer.training.policy import build_model, build_tokenizer


def test_reader_reads_what_trl_writes(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = build_tokenizer()
    model = build_model("nano", tok)

    def accuracy_reward(completions, **kw):
        return [1.0 if c.strip() == "2" else 0.0 for c in completions]

    def brevity(completions, **kw):
        return [-len(c) / 10 for c in completions]

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, logging_steps=1, save_steps=2, report_to="none", use_cpu=True, bf16=False,
                      log_completions=True, num_completions_to_print=1, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy_reward, brevity], args=args, processing_class=tok,
                          train_dataset=Dataset.from_dict({"prompt": ["1+1=", "0+2="] * 8}))
    trainer.train()

    ev = load_evidence(tmp_path / "out")
    assert ev.source == "trl"
    assert sorted(ev.metrics["step"]) == [1, 2]
    assert {"reward", "frac_reward_zero_std", "rewards/accuracy_reward/mean"} <= set(ev.metrics.columns)
    r = ev.rollouts
    assert len(r) == 2 * 8 and sorted(r["step"].unique()) == [1, 2]
    assert {"reward_accuracy_reward", "reward_brevity", "advantage", "group_id", "prompt_id"} <= set(r.columns)
    assert (r.groupby("group_id").size() == 4).all() and r.groupby("group_id")["prompt"].nunique().eq(1).all()
    assert ((r["reward"] - (r["reward_accuracy_reward"] + r["reward_brevity"])).abs() < 1e-6).all()
    # a 0/1 reward named accuracy_reward gives strict correctness
    assert r["correct"].notna().all() and set(r["correct"].unique()) <= {True, False}
    assert (r["correct"] == (r["reward_accuracy_reward"] == 1.0)).all()
