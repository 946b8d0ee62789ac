"""Benchmark (issue 16): the wall time of one backtest look with 6 arms, by launcher.

Six branch jobs — what a look of a 3-seed backtest with a control and two treatments submits — forked from one
checkpoint of the nano policy on arith (the baseline recipe), each ``--steps`` trainer steps, run as one batch by
``LocalLauncher(workers=1)``, ``LocalLauncher(workers=2)`` and ``RayLauncher`` (a local head started here).
Each arm gets fresh job names, so nothing is read back; the batch's wall time counts from submission to the
last outcome and includes the launcher's start (worker imports, Ray head). The speed-up is against the one-
worker arm; the ideal is min(workers, cores). On a 2-core machine two workers each get one torch thread where
one worker had two, so the ideal speed-up is bounded by how well one job uses two threads.

    .venv/bin/python bench/launchers.py [--steps 20] [--arms local1 local2 ray]
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from _common import parser, save

# the nano policy with a short warm start: the bench measures how jobs are run, not what they learn
POLICY = {"size": "nano", "sft_steps": 150}


def parent_checkpoint(home: Path, harness: Path) -> str:
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.jobs.runner import run_job

    res = run_job(JobSpec(task="arith", harness=str(harness), steps=2, seed=0, save_every=2, name="launch-parent",
                          policy=PolicySpec(**POLICY)), home)
    return f"{Path(res.run_dir).name}@2"


def main() -> None:
    p = parser(__doc__, "bench-launchers")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--arms", nargs="+", default=["local1", "local2", "ray"])
    a = p.parse_args()
    from evotrainer.jobs.launchers import JobRequest, LocalLauncher, RayLauncher

    home = Path(a.home)
    home.mkdir(parents=True, exist_ok=True)
    harness = Path(__file__).resolve().parents[1] / "harnesses" / "grpo-baseline.yaml"
    meta = home / "jobs" / "launch-parent" / "meta.json"
    fork = "launch-parent@2" if meta.exists() else parent_checkpoint(home, harness)
    rows = []
    stamp = time.strftime("%H%M%S")
    for arm in a.arms:
        launcher = {"local1": lambda: LocalLauncher(workers=1, timeout_s=None),
                    "local2": lambda: LocalLauncher(workers=2, timeout_s=None),
                    "ray": lambda: RayLauncher(timeout_s=None)}[arm]()
        reqs = [JobRequest(job={"task": "arith", "harness": str(harness), "steps": a.steps, "seed": 10_000 + i,
                                "save_every": a.steps, "name": f"launch-{arm}-{stamp}-{i}", "policy": POLICY,
                                "eval": {"every": a.steps, "n": 100, "k": 1}},
                           home=str(home), fork=fork) for i in range(6)]
        t = time.perf_counter()
        try:
            launcher.warm()
            out = launcher.run_many(reqs)
        finally:
            launcher.close()
        wall = time.perf_counter() - t
        rows.append({"arm": arm, "jobs": 6, "steps": a.steps, "wall_s": round(wall, 1),
                     "finished": sum(o.status == "finished" for o in out),
                     "errors": [o.error for o in out if o.status != "finished"][:3]})
        print(rows[-1], flush=True)
    base = next((r["wall_s"] for r in rows if r["arm"] == "local1"), None)
    for r in rows:
        r["speedup_vs_local1"] = round(base / r["wall_s"], 2) if base else None
    save("launchers", {"cores": os.cpu_count(), "rows": rows,
                       "ideal_speedup": {"local2": min(2, os.cpu_count() or 1), "ray": min(6, os.cpu_count() or 1)}})


if __name__ == "__main__":
    main()
