"""Benchmark 2 (issue 2): GRPO throughput at 32 prompts x 8 generations, and peak memory.

Runs the baseline harness at 32 prompts x 8 generations (= 256 completions per step) for a few steps with
evaluation off, and reports optimiser steps/s, generated tokens/s (completion tokens incl. EOS, from the
rollout records) and the process's peak RSS. The first step is excluded as warm-up.

    .venv/bin/python bench/throughput.py [--steps 20]
"""

from __future__ import annotations

from pathlib import Path

from _common import ROOT, parser, peak_rss_mib, save


def main() -> None:
    p = parser(__doc__, "bench-throughput")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--size", default="tiny")
    a = p.parse_args()

    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.harness import load_harness
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.core.home import resolve_home
    from evotrainer.evidence.model import read_metrics, read_rollouts
    from evotrainer.jobs.runner import run_job

    home = resolve_home(a.home)
    harness = load_harness(ROOT / "harnesses" / "grpo-baseline.yaml").with_knob("grpo.prompts_per_step", 32)
    spec = JobSpec(task="arith", harness=harness, steps=a.steps, seed=0,
                   policy=PolicySpec(size=a.size), eval=EvalSpec(every=0), save_every=10_000)
    res = run_job(spec, home)
    m = read_metrics(Path(res.run_dir)).set_index("step")
    times = m["step_time"].dropna()
    steady = times.iloc[1:]
    r = read_rollouts(Path(res.run_dir), columns=["step", "length", "truncated"])
    r = r[r["step"] > 1]
    tokens = int(r["length"].sum() + (~r["truncated"]).sum())  # + EOS tokens
    save("throughput", {
        "size": a.size, "prompts_per_step": 32, "num_generations": 8, "steps": a.steps,
        "steps_per_s": round(len(steady) / steady.sum(), 3),
        "seconds_per_step": round(float(steady.mean()), 3),
        "generated_tokens_per_s": round(tokens / steady.sum(), 1),
        "mean_completion_tokens": round(float(r["length"].mean()), 2),
        "first_step_s": round(float(times.iloc[0]), 3),
        "job_wall_s": res.seconds, "job_setup_s": res.setup_seconds,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    })


if __name__ == "__main__":
    main()
