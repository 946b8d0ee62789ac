"""Benchmark (issue 4): does a heuristic-brain campaign beat the static baseline at an equal step budget?

For each task and seed: (a) the static baseline harness trained for the whole budget as one job, and
(b) a heuristic-brain campaign (auto approval) whose budget counts every segment and every backtest
branch. Reports held-out greedy accuracy of each (mean and a t interval over seeds), the decisions the
campaigns made, and the share of campaign wall time spent outside trainer steps (target <= 10 %). A
trainer step is the Trainer's whole optimiser step (``step_wall_time``: generation, scoring, backward and
the optimiser update); the share outside TRL's own ``step_time``, which stops before the update, is
reported beside it.

    .venv/bin/python bench/campaign.py [--tasks arith countdown] [--seeds 0 1 2] [--budget 400]

Both arms start from the same warm-started policy and the same harness (the baseline recipe at 32 prompts
per step unless --harness is given). Results are merged into bench/results/campaign.json by task, so
the tasks can be run in separate invocations.
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


def _static(task: str, seed: int, a, home: Path) -> tuple[float, float]:
    """The static arm: the starting harness trained for the whole budget as one job."""
    from evotrainer.evaluation import EvalSpec
    from evotrainer.evidence import read_metrics
    from evotrainer.jobs.runner import JobSpec, run_job

    t = time.perf_counter()
    static = run_job(JobSpec(task=task, harness=a.harness, steps=a.budget, seed=seed, save_every=a.budget,
                             eval=EvalSpec(every=a.budget, n=300, k=1)), home)
    acc = float(read_metrics(Path(static.run_dir))["eval/greedy_accuracy"].dropna().iloc[-1])
    return acc, time.perf_counter() - t


def main() -> None:
    p = parser(__doc__, "bench-campaign")
    p.add_argument("--tasks", nargs="+", default=["arith", "countdown"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=400)
    p.add_argument("--segment", type=int, default=40)
    p.add_argument("--branch", type=int, default=20)
    p.add_argument("--reuse-static", action="store_true",
                   help="take each (task, seed)'s static arm from the previous bench/results/campaign.json instead of "
                        "retraining it (valid while the budget, harness and trainer are unchanged)")
    p.add_argument("--harness", default=None, help="starting harness (default: grpo-baseline at 32 prompts/step)")
    a = p.parse_args()

    from evotrainer.agent.campaign import start_campaign
    from evotrainer.cli import campaign_summary
    from evotrainer.evidence import read_metrics
    from evotrainer.home import resolve_home
    from evotrainer.store import Store

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    if a.harness is None:
        base = yaml.safe_load((ROOT / "harnesses" / "grpo-baseline.yaml").read_text())
        base["name"], base["grpo"]["prompts_per_step"] = "bench-32", 32
        a.harness = str(home / "bench-32.yaml")
        Path(a.harness).write_text(yaml.safe_dump(base, sort_keys=False))
    rows = []
    prev_file = ROOT / "bench" / "results" / "campaign.json"
    prev_static = {}
    if a.reuse_static and prev_file.exists():
        import json

        prev = json.loads(prev_file.read_text())
        if prev.get("budget") == a.budget:
            prev_static = {(r["task"], r["seed"]): r for r in prev.get("runs", [])}
    for task in a.tasks:
        for seed in a.seeds:
            if (task, seed) in prev_static:
                acc_static, static_wall = prev_static[(task, seed)]["static"], prev_static[(task, seed)]["static_wall_s"]
            else:
                acc_static, static_wall = _static(task, seed, a, home)
            spec = {"name": f"bench-{task}-s{seed}", "task": task, "harness": a.harness, "seed": seed,
                    "segment_steps": a.segment, "budget": {"total_steps": a.budget},
                    "backtest": {"branch_steps": a.branch, "seeds": 2, "max_proposals": 2, "min_effect": 0.01},
                    "autonomy": "auto",
                    "eval": {"every": 0, "n": 300, "k": 1}, "stop": {"plateau_rounds": 100}}
            spec_file = home / f"{spec['name']}.yaml"
            spec_file.write_text(yaml.safe_dump(spec))
            t = time.perf_counter()
            cid = start_campaign(spec_file, home, log=print)
            wall = time.perf_counter() - t
            summary = campaign_summary(home, cid)
            # trainer-step time: the Trainer's whole optimiser step (step_wall_time); TRL's step_time, which
            # stops before the optimiser update, is reported beside it
            train_s = trl_s = 0.0
            for e in Store.for_home(home).ledger(cid):
                m = read_metrics(home / "jobs" / e.key)
                trl = float(m["step_time"].dropna().sum()) if "step_time" in m else 0.0
                trl_s += trl
                train_s += float(m["step_wall_time"].dropna().sum()) if "step_wall_time" in m else trl
            rows.append({"task": task, "seed": seed, "static": acc_static, "campaign": summary["accuracy"]["end"],
                         "campaign_start": summary["accuracy"]["start"], "steps_spent": summary["budget"]["spent"],
                         "decisions": [(d["knob"], d["new"], d["outcome"]) for d in summary["decisions"]],
                         "outside_trainer_share": round(1 - train_s / wall, 3),
                         "outside_trl_step_time_share": round(1 - trl_s / wall, 3), "campaign_wall_s": round(wall, 1),
                         "static_wall_s": round(static_wall, 1), "stop_reason": summary["campaign"].get("error")})
            print(rows[-1], flush=True)
    prev = ROOT / "bench" / "results" / "campaign.json"
    if prev.exists():  # keep other tasks' rows from earlier invocations
        import json

        rows = [r for r in json.loads(prev.read_text()).get("runs", []) if r["task"] not in a.tasks] + rows
    out = {}
    for task in sorted({r["task"] for r in rows}):
        r = [x for x in rows if x["task"] == task]
        out[task] = {k: {"mean": round(statistics.fmean([x[k] for x in r]), 4), "ci90": _interval([x[k] for x in r])}
                     for k in ("static", "campaign")}
    save("campaign", {"budget": a.budget, "segment": a.segment, "branch": a.branch, "runs": rows, "summary": out})


if __name__ == "__main__":
    main()
