"""Benchmark (issue 17): what `EvoTrainerCallback` adds to a TRL GRPO step.

A plain TRL script's trainer (the warm-started tiny arith policy as a plain HF dir, 32 prompts x 8 completions =
256 rollouts per step, 16 tokens, exact-match reward) runs ``--steps`` steps in each arm: no callback, the callback
with its default ``every=10``, and ``every=1`` (a diagnosis after every step: the worst case). Arms are interleaved
(``--rounds`` rounds of all arms, each a fresh trainer from the same weights and seed) so that load from other
processes on the machine falls on every arm alike; ``overhead_per_round`` pairs each arm with the no-callback arm of
its own round (the machine's speed drifts by ±20 % between trainers, more than the effect measured). A step's time is measured from one ``on_step_begin`` to the
next (so it includes logging and the callback's ``on_log`` diagnosis); the first step of each trainer is dropped.

    .venv/bin/python bench/callback_overhead.py [--steps 12] [--rounds 2]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time

from _common import parser, save


def main() -> None:
    p = parser(__doc__, "bench-issue17")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model", default=None, help="HF model dir (default: HOME/policies/arith__tiny__s0__b608a2bca4)")
    a = p.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from bench.trl_script import exact_match, problems
    from evotrainer.callback import EvoTrainerCallback
    from evotrainer.home import resolve_home

    model_dir = a.model or str(resolve_home(a.home) / "policies" / "arith__tiny__s0__b608a2bca4")

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

    class Timed(EvoTrainerCallback):
        """The callback, with the wall time of its own hooks (on the training thread) added up."""

        spent = 0.0

        def on_step_end(self, *args, **kw):
            t0 = time.perf_counter()
            try:
                return super().on_step_end(*args, **kw)
            finally:
                self.spent += time.perf_counter() - t0

        def on_log(self, *args, **kw):
            t0 = time.perf_counter()
            try:
                return super().on_log(*args, **kw)
            finally:
                self.spent += time.perf_counter() - t0

    data = Dataset.from_list(problems(4096, 3, 7))
    arms = {"none": None, "callback every=10": 10, "callback every=1": 1}
    steps: dict[str, list[float]] = {k: [] for k in arms}
    per_round: dict[str, list[float]] = {k: [] for k in arms}  # each round's mean step time: arms paired by round
    hook_ms: dict[str, list[float]] = {k: [] for k in arms}  # the callback's own time per step, training thread
    for rnd in range(a.rounds):
        for arm, every in arms.items():
            with tempfile.TemporaryDirectory() as tmp:
                clock = Clock()
                cbs = [clock] + ([Timed(every=every)] if every else [])
                args = GRPOConfig(output_dir=tmp, max_steps=a.steps, per_device_train_batch_size=256, num_generations=8,
                                  max_completion_length=16, learning_rate=3e-4, beta=0.0, loss_type="dapo",
                                  logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False,
                                  gradient_checkpointing=False, seed=0, disable_tqdm=True)
                t = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=[exact_match],
                                args=args, processing_class=AutoTokenizer.from_pretrained(model_dir), train_dataset=data,
                                callbacks=cbs)
                t.train()
                d = [t1 - t0 for t0, t1 in zip(clock.marks, clock.marks[1:])][1:]
                steps[arm] += d
                per_round[arm].append(statistics.mean(d))
                if every:
                    hook_ms[arm].append(1000 * cbs[1].spent / a.steps)
                print(json.dumps({"round": rnd, "arm": arm, "step_s": [round(x, 3) for x in d]}), flush=True)
    base = statistics.mean(steps["none"])
    out = {}
    for arm, d in steps.items():
        out[arm] = {"steps": len(d), "mean_s": round(statistics.mean(d), 3), "median_s": round(statistics.median(d), 3),
                    "overhead_mean": round(statistics.mean(d) / base - 1, 4),
                    "overhead_median": round(statistics.median(d) / statistics.median(steps["none"]) - 1, 4),
                    "overhead_per_round": [round(x / b - 1, 4) for x, b in zip(per_round[arm], per_round["none"])],
                    "hook_ms_per_step": [round(x, 1) for x in hook_ms[arm]]}
    save("callback_overhead", {"rollouts_per_step": 256, "steps_per_trainer": a.steps, "rounds": a.rounds,
                               "arms": out, "raw": {k: [round(x, 3) for x in v] for k, v in steps.items()},
                               "pass": out["callback every=10"]["overhead_mean"] <= 0.05})


if __name__ == "__main__":
    main()
