"""Benchmark (issue 17): what `EvoTrainerCallback` adds to a TRL GRPO step.

A plain TRL script's trainer (the warm-started tiny arith policy as a plain HF dir, 32 prompts x 8 completions =
256 rollouts per step, 16 tokens, exact-match reward) runs ``--steps`` steps in each arm: no callback, the callback
with its defaults (``every=10``, ``max_overhead=0.01``: the diagnosis waits longer when it would take more than 1 % of
training time), the same writing its Parquet files on the training thread (``background_writes=False``), and
``every=1`` uncapped (a diagnosis after every step: the worst case). Arms are interleaved
(``--rounds`` rounds of all arms, each a fresh trainer from the same weights and seed) so that load from other
processes on the machine falls on every arm alike; ``overhead_per_round`` pairs each arm with the no-callback arm of
its own round (the machine's speed drifts by ±20 % between trainers, more than the effect measured). A step's time is measured from one ``on_step_begin`` to the
next (so it includes logging and the callback's ``on_log`` diagnosis); the first step of each trainer is dropped.

    .venv/bin/python bench/callback_overhead.py [--steps 30] [--rounds 6]
    .venv/bin/python bench/callback_overhead.py --design toggle --steps 250 --rounds 3 [--block 5]

``--design toggle`` pairs within one trainer instead of across trainers: each of ``--rounds`` trainers runs
``--steps`` steps with the callback (defaults) attached throughout but passing its hooks through only in every other
block of ``--block`` steps (the order within each pair of blocks drawn from a seeded RNG, so neither side always
comes first); a switched-off step costs the callback nothing. Each pair of blocks gives one overhead (the on block's
mean step over the off block's), and the t-interval is over pairs. The first two blocks (the trainer's warm-up and
its partner) are dropped, and so is the first step of each off block that follows an on block, which may carry the
writer thread's last Parquet write (so the on side misses that ~2 ms of one step in ``--block``). The diagnosis runs
only in on blocks (at a logging step at or after the next due step), so its cost falls on the on side, at about
twice its real share of an on step (``max_overhead`` spaces it by all steps, on and off): conservative. This removes
the ±10-20 % drift between trainers that the first design averages over rounds. ``--cadence own-steps`` removes the
doubling instead: the callback gets twice the default ``every`` and half the default ``max_overhead``, so that on the
on steps, the only ones it sees, it diagnoses as often, and for the same share of their time, as the defaults do in a
run whose every step it sees (what a user's script gets); the output file then ends in ``_own_cadence``.

Reported per arm: the overhead of each round (its mean step time over the no-callback arm's of that round), their
mean with a 95 % t-interval over rounds, the callback's own time per step on the training thread (``hook_ms``) and
the diagnosis's share of the trainer's wall time as the callback measured it (``diagnosis_share``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time

from _common import parser, save


def main() -> None:
    p = parser(__doc__, "bench-issue17")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--model", default=None, help="HF model dir (default: HOME/policies/arith__tiny__s0__b608a2bca4)")
    p.add_argument("--design", choices=["trainers", "toggle"], default="trainers",
                   help="trainers: one fresh trainer per arm and round; toggle: the callback switched on and off in "
                        "blocks within one trainer (see above)")
    p.add_argument("--block", type=int, default=5, help="toggle: steps per block (at least 2)")
    p.add_argument("--writes", choices=["background", "training-thread"], default="background",
                   help="toggle: the callback's background_writes (default: on, as the callback's default)")
    p.add_argument("--cadence", choices=["all-steps", "own-steps"], default="all-steps",
                   help="toggle: all-steps = the defaults, spaced by every step, on and off (the diagnosis at twice "
                        "its real share of an on step); own-steps = spaced by the on steps alone (see above)")
    a = p.parse_args()
    if a.design == "toggle" and (a.block < 2 or a.steps < 4 * a.block):
        p.error(f"--design toggle needs --block >= 2 and --steps >= 4 x --block: two warm-up blocks and a pair "
                f"(got {a.block}, {a.steps})")

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from bench.trl_script import exact_match, problems
    from evotrainer.core.home import resolve_home
    from evotrainer.monitor.callback import EvoTrainerCallback

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
    from scipy import stats

    def trainer(tmp: str, callbacks: list) -> GRPOTrainer:
        args = GRPOConfig(output_dir=tmp, max_steps=a.steps, per_device_train_batch_size=256, num_generations=8,
                          max_completion_length=16, learning_rate=3e-4, beta=0.0, loss_type="dapo",
                          logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False,
                          gradient_checkpointing=False, seed=0, disable_tqdm=True)
        return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=[exact_match],
                           args=args, processing_class=AutoTokenizer.from_pretrained(model_dir), train_dataset=data,
                           callbacks=callbacks)

    if a.design == "toggle":
        return toggle(a, trainer, Timed, TrainerCallback, stats)

    arms = {"none": None, "callback (defaults)": {}, "callback, writes on the training thread": {"background_writes": False},
            "callback every=1, uncapped": {"every": 1, "max_overhead": None}}
    steps: dict[str, list[float]] = {k: [] for k in arms}
    per_round: dict[str, list[float]] = {k: [] for k in arms}  # each round's mean step time: arms paired by round
    hook_ms: dict[str, list[float]] = {k: [] for k in arms}  # the callback's own time per step, training thread
    share: dict[str, list[float]] = {k: [] for k in arms}  # the diagnosis's seconds over the trainer's wall time
    diagnosed_at: dict[str, list[list[int]]] = {k: [] for k in arms}
    for rnd in range(a.rounds):
        for arm, kw in arms.items():
            with tempfile.TemporaryDirectory() as tmp:
                clock = Clock()
                cbs = [clock] + ([Timed(**kw)] if kw is not None else [])
                t = trainer(tmp, cbs)
                t.train()
                d = [t1 - t0 for t0, t1 in zip(clock.marks, clock.marks[1:])][1:]
                steps[arm] += d
                per_round[arm].append(statistics.mean(d))
                if kw is not None:
                    hook_ms[arm].append(1000 * cbs[1].spent / a.steps)
                    share[arm].append(sum(s for _, s in cbs[1].diagnoses) / (clock.marks[-1] - clock.marks[0]))
                    diagnosed_at[arm].append([s for s, _ in cbs[1].diagnoses])
                print(json.dumps({"round": rnd, "arm": arm, "step_s": [round(x, 3) for x in d]}), flush=True)
    base = statistics.mean(steps["none"])
    out = {}
    for arm, d in steps.items():
        rounds = [x / b - 1 for x, b in zip(per_round[arm], per_round["none"])]
        ci = stats.t.interval(0.95, len(rounds) - 1, loc=statistics.mean(rounds), scale=stats.sem(rounds)) \
            if len(rounds) > 1 and arm != "none" else (None, None)
        out[arm] = {"overhead_per_round_mean": round(statistics.mean(rounds), 4),
                    "overhead_per_round_ci95": [round(float(x), 4) if x is not None else None for x in ci],"steps": len(d), "mean_s": round(statistics.mean(d), 3), "median_s": round(statistics.median(d), 3),
                    "overhead_mean": round(statistics.mean(d) / base - 1, 4),
                    "overhead_median": round(statistics.median(d) / statistics.median(steps["none"]) - 1, 4),
                    "overhead_per_round": [round(x / b - 1, 4) for x, b in zip(per_round[arm], per_round["none"])],
                    "hook_ms_per_step": [round(x, 1) for x in hook_ms[arm]],
                    "diagnosis_share": [round(x, 4) for x in share[arm]], "diagnosed_at": diagnosed_at[arm][:1]}
    save("callback_overhead", {"rollouts_per_step": 256, "steps_per_trainer": a.steps, "rounds": a.rounds,
                               "arms": out, "raw": {k: [round(x, 3) for x in v] for k, v in steps.items()},
                               "pass": out["callback (defaults)"]["overhead_per_round_mean"] <= 0.05})


def toggle(a, trainer, Timed, TrainerCallback, stats) -> None:
    """The within-trainer design: the callback's hooks pass through in every other block of ``a.block`` steps."""
    import random

    class Switched(Timed):
        on = False

        def on_step_end(self, *args, **kw):
            return super().on_step_end(*args, **kw) if self.on else None

        def on_log(self, *args, **kw):
            return super().on_log(*args, **kw) if self.on else None

    class Switch(TrainerCallback):
        """Marks each step's start and sets whether the callback is on for it (blocks in random pair order)."""

        def __init__(self, cb: Switched, rng: random.Random):
            self.cb, self.rng, self.marks, self.state_of = cb, rng, [], []
            self.order: list[bool] = []

        def on_step_begin(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())
            block = state.global_step // a.block
            while len(self.order) <= block:
                first = self.rng.random() < 0.5
                self.order += [first, not first]
            self.cb.on = self.order[block]
            self.state_of.append((block, self.cb.on))

        def on_train_end(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

    pairs: list[float] = []
    on_s: list[float] = []
    off_s: list[float] = []
    hook_ms: list[float] = []
    import inspect

    defaults = inspect.signature(Timed.__init__).parameters
    cadence = {} if a.cadence == "all-steps" else {"every": 2 * defaults["every"].default,
                                                     "max_overhead": defaults["max_overhead"].default / 2}
    for rnd in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cb = Switched(background_writes=a.writes == "background", **cadence)
            sw = Switch(cb, random.Random(rnd))
            trainer(tmp, [sw, cb]).train()
        d = [t1 - t0 for t0, t1 in zip(sw.marks, sw.marks[1:])]
        by_block: dict[int, list[float]] = {}
        prev_on = False
        for (block, on), s in zip(sw.state_of, d):
            if block >= 2 and not (not on and prev_on):  # warm-up and its partner dropped; an off step right after an on one too
                by_block.setdefault(block, []).append(s)
                (on_s if on else off_s).append(s)
            prev_on = on
        for b in range(2, max(by_block) + 1, 2):  # pairs (2,3), (4,5), ...: block 1's partner was the warm-up
            if b in by_block and b + 1 in by_block:
                x, y = by_block[b], by_block[b + 1]
                on_b, off_b = (x, y) if sw.order[b] else (y, x)
                pairs.append(statistics.mean(on_b) / statistics.mean(off_b) - 1)
        n_on = sum(1 for _, on in sw.state_of if on)
        hook_ms.append(1000 * cb.spent / max(n_on, 1))
        print(json.dumps({"round": rnd, "pairs": len(pairs), "diagnosed_at": [s for s, _ in cb.diagnoses]}), flush=True)
    mean = statistics.mean(pairs)
    ci = stats.t.interval(0.95, len(pairs) - 1, loc=mean, scale=stats.sem(pairs)) if len(pairs) > 1 else (mean, mean)
    save("callback_overhead_toggle" + ("" if a.writes == "background" else "_training_thread")
         + ("" if a.cadence == "all-steps" else "_own_cadence"), {
        "design": "toggle", "writes": a.writes, "cadence": a.cadence, "callback_kwargs": cadence, "rollouts_per_step": 256, "steps_per_trainer": a.steps, "trainers": a.rounds,
        "block": a.block, "pairs": len(pairs), "overhead_mean": round(mean, 4),
        "overhead_median": round(statistics.median(pairs), 4), "overhead_ci95": [round(float(x), 4) for x in ci],
        "on_mean_s": round(statistics.mean(on_s), 4), "off_mean_s": round(statistics.mean(off_s), 4),
        "hook_ms_per_on_step": [round(x, 1) for x in hook_ms], "overhead_per_pair": [round(x, 4) for x in pairs],
        "pass": mean <= 0.05})


if __name__ == "__main__":
    main()
