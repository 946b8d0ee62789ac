"""Benchmark 3 (issue 2): what does changing the harness between segments cost?

Campaigns train in segments (stop -> new trainer -> resume from the checkpoint) so that the harness can
change between them. This runs 200 steps of the baseline harness once as a single job and once as
4 segments of 50 (a job plus 3 forks, each a fresh GRPOTrainer resumed from the previous checkpoint),
in-process as campaigns do, with evaluation off, and compares wall time. Target: <= 10 % extra.

    .venv/bin/python bench/segments.py [--total 200] [--segments 4]
"""

from __future__ import annotations

import time

from _common import ROOT, parser, save


def main() -> None:
    p = parser(__doc__, "bench-segments")
    p.add_argument("--total", type=int, default=200)
    p.add_argument("--segments", type=int, default=4)
    a = p.parse_args()

    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.core.home import resolve_home
    from evotrainer.jobs.runner import run_job

    home = resolve_home(a.home)
    harness = str(ROOT / "harnesses" / "grpo-baseline.yaml")
    seg = a.total // a.segments

    def spec(steps):
        return JobSpec(task="arith", harness=harness, steps=steps, seed=0, eval=EvalSpec(every=0), save_every=seg)

    run_job(spec(1), home)  # build/cache the warm-started base outside both timings
    t = time.perf_counter()
    single = run_job(spec(a.total), home)
    t_single = time.perf_counter() - t

    t = time.perf_counter()
    parts = [run_job(spec(seg), home)]
    for _ in range(a.segments - 1):
        parts.append(run_job(spec(seg), home, fork=parts[-1].name))
    t_seg = time.perf_counter() - t
    assert parts[-1].steps_done == a.total

    save("segments", {
        "total_steps": a.total, "segments": a.segments,
        "single_wall_s": round(t_single, 1), "segmented_wall_s": round(t_seg, 1),
        "overhead_pct": round(100 * (t_seg - t_single) / t_single, 1),
        "single_train_s": single.train_seconds,
        "segment_setup_s": [p.setup_seconds for p in parts], "segment_train_s": [p.train_seconds for p in parts],
        "target_overhead_pct": 10,
    })


if __name__ == "__main__":
    main()
