"""Benchmark (issue 4): does a heuristic-brain campaign beat the static baseline at an equal step budget?

For each task and seed: (a) the static baseline harness trained for the whole budget as one job, and
(b) a heuristic-brain campaign (auto approval) whose budget counts every segment and every backtest
branch. Reports held-out greedy accuracy of each (mean and a t interval over seeds), the decisions the
campaigns made, and the share of campaign wall time spent outside trainer steps (target <= 10 %).

    .venv/bin/python bench/campaign.py [--tasks arith countdown] [--seeds 0 1 2] [--budget 600]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import yaml
from _common import ROOT, parser, save


def _interval(xs: list[float], confidence: float = 0.9) -> list[float]:
    from scipy import stats

    if len(xs) < 2:
        return [xs[0], xs[0]] if xs else [float("nan")] * 2
    half = stats.t.ppf(0.5 + confidence / 2, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return [round(statistics.fmean(xs) - half, 4), round(statistics.fmean(xs) + half, 4)]


def main() -> None:
    p = parser(__doc__, "bench-campaign")
    p.add_argument("--tasks", nargs="+", default=["arith", "countdown"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=600)
    p.add_argument("--harness", default=str(ROOT / "harnesses" / "grpo-baseline.yaml"))
    a = p.parse_args()

    from evotrainer.agent.campaign import start_campaign
    from evotrainer.cli import campaign_summary
    from evotrainer.evaluation import EvalSpec
    from evotrainer.evidence import read_metrics
    from evotrainer.home import resolve_home
    from evotrainer.jobs.runner import JobSpec, run_job
    from evotrainer.store import Store

    home = resolve_home(a.home)
    rows = []
    for task in a.tasks:
        for seed in a.seeds:
            static = run_job(JobSpec(task=task, harness=a.harness, steps=a.budget, seed=seed,
                                     eval=EvalSpec(every=a.budget, n=300, k=1)), home)
            acc_static = float(read_metrics(Path(static.run_dir))["eval/greedy_accuracy"].dropna().iloc[-1])
            spec = {"name": f"bench-{task}-s{seed}", "task": task, "harness": a.harness, "seed": seed,
                    "segment_steps": 50, "budget": {"total_steps": a.budget},
                    "backtest": {"branch_steps": 25, "seeds": 2, "max_proposals": 2}, "autonomy": "auto",
                    "eval": {"every": 0, "n": 300, "k": 1}, "stop": {"plateau_rounds": 100}}
            spec_file = home / f"{spec['name']}.yaml"
            spec_file.write_text(yaml.safe_dump(spec))
            t = time.perf_counter()
            cid = start_campaign(spec_file, home, log=print)
            wall = time.perf_counter() - t
            summary = campaign_summary(home, cid)
            train_s = 0.0
            for e in Store.for_home(home).ledger(cid):
                m = read_metrics(home / "jobs" / e.key)
                train_s += float(m["step_time"].dropna().sum()) if "step_time" in m else 0.0
            rows.append({"task": task, "seed": seed, "static": acc_static, "campaign": summary["accuracy"]["end"],
                         "campaign_start": summary["accuracy"]["start"], "steps_spent": summary["budget"]["spent"],
                         "decisions": [(d["knob"], d["new"], d["outcome"]) for d in summary["decisions"]],
                         "outside_trainer_share": round(1 - train_s / wall, 3)})
            print(rows[-1], flush=True)
    out = {}
    for task in a.tasks:
        r = [x for x in rows if x["task"] == task]
        out[task] = {k: {"mean": round(statistics.fmean([x[k] for x in r]), 4), "ci90": _interval([x[k] for x in r])}
                     for k in ("static", "campaign")}
    save("campaign", {"budget": a.budget, "runs": rows, "summary": out})


if __name__ == "__main__":
    main()
