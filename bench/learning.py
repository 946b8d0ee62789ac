"""Benchmark 1 (issue 2): does GRPO on the baseline harness actually teach the tiny policy?

From the warm-started tiny policy on 3-digit `arith`, held-out greedy accuracy (500 held-out problems)
before and after 300 GRPO steps of `harnesses/grpo-baseline.yaml`, for 3 seeds. Target: +25 points. The baseline trains on 64 prompts x 8 completions per step.

    .venv/bin/python bench/learning.py [--steps 300] [--seeds 0 1 2]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from _common import ROOT, parser, save


def main() -> None:
    p = parser(__doc__, "bench-learning")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--harness", default=str(ROOT / "harnesses" / "grpo-baseline.yaml"))
    a = p.parse_args()

    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.core.home import resolve_home
    from evotrainer.evidence.model import read_metrics
    from evotrainer.jobs.runner import run_job

    home = resolve_home(a.home)
    rows = []
    for seed in a.seeds:
        t = time.time()
        spec = JobSpec(task="arith", harness=a.harness, steps=a.steps, seed=seed,
                       eval=EvalSpec(every=100, n=500, k=8), save_every=100)
        res = run_job(spec, home, log=print)
        m = read_metrics(Path(res.run_dir)).set_index("step")
        ev = m["eval/greedy_accuracy"].dropna()
        pk = m["eval/pass_at_8"].dropna()
        row = {"seed": seed, "run": res.name, "before": float(ev.iloc[0]), "after": float(ev.iloc[-1]),
               "pass_at_8_before": float(pk.iloc[0]), "pass_at_8_after": float(pk.iloc[-1]),
               "curve": {int(k): float(v) for k, v in ev.items()}, "minutes": round((time.time() - t) / 60, 1)}
        row["gain_points"] = round(100 * (row["after"] - row["before"]), 1)
        rows.append(row)
        print(row, flush=True)
    gains = [r["gain_points"] for r in rows]
    save("learning", {"steps": a.steps, "harness": a.harness, "runs": rows,
                      "mean_gain_points": round(statistics.mean(gains), 1), "min_gain_points": min(gains),
                      "target_gain_points": 25, "pass": min(gains) >= 25})


if __name__ == "__main__":
    main()
