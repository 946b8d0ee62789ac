"""A plain TRL GRPO script, as a user would write one: no EvoTrainer in the training path.

It trains a local Hugging Face model directory (the bench passes our warm-started tiny arith policy, saved as a
plain HF dir) on 3-digit sums with `trl.GRPOTrainer`, `log_completions=True`, and writes TRL's own output dir —
what `evotrainer diagnose` / `watch` read. Variants make the pathologies of `harnesses/pathological/` with plain
TRL knobs:

- healthy:   exact-match reward, lr 3e-4, 16 prompts x 8 completions, 16 tokens.
- lenient:   1-digit sums, a reward that pays the answer appearing anywhere (weight 1) and an exact-match
             monitor at weight 0 (TRL still logs it), temperature 1.5: answer spraying, reward hacking.
- short:     2 completion tokens: every 3-digit answer truncated.
- lr-high:   lr 3e-2: the policy collapses.

    .venv/bin/python bench/trl_script.py --model DIR --out DIR --variant healthy --steps 60 --seed 0
"""

from __future__ import annotations

import argparse
import os
import random
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def problems(n: int, digits: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    lo, hi = (0 if digits == 1 else 10 ** (digits - 1)), 10 ** digits - 1
    out = []
    for _ in range(n):
        a, b, op = rng.randint(lo, hi), rng.randint(lo, hi), rng.choice("+-")
        out.append({"prompt": f"{a}{op}{b}=", "answer": str(a + b if op == "+" else a - b)})
    return out


def exact_match(completions, answer, **kw):
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]


def lenient(completions, answer, **kw):
    return [1.0 if re.search(rf"(?<![\d-]){re.escape(a)}(?!\d)", c) else 0.0 for c, a in zip(completions, answer)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variant", choices=["healthy", "lenient", "short", "lr-high"], default="healthy")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    digits = 1 if a.variant == "lenient" else 3
    data = Dataset.from_list(problems(4096, digits, 1000 + a.seed))
    rewards, weights = ([lenient, exact_match], [1.0, 0.0]) if a.variant == "lenient" else ([exact_match], [1.0])
    args = GRPOConfig(
        output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=128, num_generations=8,
        max_completion_length={"short": 2, "lenient": 24}.get(a.variant, 16),
        temperature=1.5 if a.variant == "lenient" else 1.0,
        learning_rate={"lr-high": 3e-2}.get(a.variant, 3e-4), lr_scheduler_type="constant", warmup_steps=0,
        beta=0.0, loss_type="dapo", reward_weights=weights, logging_steps=1, save_steps=a.steps, save_only_model=True,
        report_to="none", use_cpu=True, bf16=False, gradient_checkpointing=False, seed=a.seed, log_completions=True,
        num_completions_to_print=0,
        disable_tqdm=True)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model)
    GRPOTrainer(model=model, reward_funcs=rewards, args=args, processing_class=tok, train_dataset=data).train()


if __name__ == "__main__":
    main()
