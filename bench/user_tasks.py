"""Benchmark (issue 58, a first measurement): a campaign against its static recipe on a user's task, at equal steps.

For each campaign spec (by default the two reasoning-gym specs, ``campaigns/chain-sum-tiny.yaml`` with the tiny
policy and ``campaigns/gcd-smollm2.yaml`` with SmolLM2) and each seed, two arms start from the same warm start:

(a) **static**: the spec's starting harness for the spec's whole budget, one job;
(b) **campaign**: the spec itself, run with that seed (heuristic brain, automatic approval).

Each arm's result is the greedy accuracy of its final policy on the spec's confirmation split (problems neither arm
chose on), with a t interval over seeds for each arm and for the paired difference. Nothing here is a target: the
numbers are reported as they come out.

    .venv/bin/python bench/user_tasks.py [--specs campaigns/chain-sum-tiny.yaml ...] [--seeds 0 1 2]

Rows are merged into bench/results/user_tasks.json by (spec, seed, arm), so an interrupted bench resumes.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT, parser, save
from campaign import _interval  # the t interval over seeds every bench reports

RESULTS = ROOT / "bench" / "results" / "user_tasks.json"
SPECS = [ROOT / "campaigns" / "chain-sum-tiny.yaml", ROOT / "campaigns" / "gcd-smollm2.yaml"]


def confirmation(spec, checkpoint: str, budget: int) -> float:
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import split_problems
    from evotrainer.training.policy import policy_accuracy

    task = get_task(spec.task, spec.task_options)
    return policy_accuracy(checkpoint, task, split_problems(task, spec.eval, "confirmation"), spec.eval, budget)


def run_static(spec, seed: int, home: Path) -> dict[str, Any]:
    from evotrainer.config.harness import load_harness
    from evotrainer.config.job import JobSpec
    from evotrainer.core.home import jobs_dir
    from evotrainer.core.runmeta import read_run_meta
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.runner import run_job

    t = time.perf_counter()
    steps = spec.budget.total_steps
    name = f"static-{spec.name}-s{seed}-b{steps}"
    run_dir = jobs_dir(home) / name
    meta, done = read_run_meta(run_dir), complete_checkpoints(run_dir)
    harness = spec.harness_path()
    if meta is not None and meta.status == "finished" and steps in done:
        checkpoint = str(done[steps])
    else:
        res = run_job(JobSpec(task=spec.task, task_options=spec.task_options, harness=str(harness), steps=steps,
                              seed=seed, save_every=steps, name=name, policy=spec.policy,
                              eval=spec.eval.model_copy(update={"every": 0})),
                      home, resume=name if run_dir.exists() else None)
        checkpoint = res.checkpoint
    budget = load_harness(harness).grpo.max_completion_length
    return {"accuracy": round(confirmation(spec, checkpoint, budget), 4), "steps": steps, "job": name,
            "wall_s": round(time.perf_counter() - t, 1)}


def run_campaign(spec_path: Path, seed: int, home: Path) -> dict[str, Any]:
    from evotrainer.agent.campaign import start_campaign
    from evotrainer.reports.summaries import campaign_summary

    t = time.perf_counter()
    cid = start_campaign(spec_path, home, log=lambda m: print(f"  [{spec_path.stem} s{seed}] {m}", flush=True),
                         seed=seed)
    s = campaign_summary(home, cid)
    conf = s["confirmation"] or {}
    return {"accuracy": conf.get("end"), "start_accuracy": conf.get("start"), "steps": s["budget"]["spent"],
            "campaign": cid, "decisions": [(d["knob"], d["new"], d["outcome"]) for d in s["decisions"]],
            "useful_share": s["spend"]["useful_share"], "wall_s": round(time.perf_counter() - t, 1)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in sorted({r["spec"] for r in rows}):
        by = {(r["seed"], r["arm"]): r for r in rows if r["spec"] == spec}
        seeds = sorted({s for s, _ in by})
        arms = {arm: [by[(s, arm)]["accuracy"] for s in seeds if (s, arm) in by] for arm in ("static", "campaign")}
        paired = [by[(s, "campaign")]["accuracy"] - by[(s, "static")]["accuracy"] for s in seeds
                  if (s, "campaign") in by and (s, "static") in by]
        out[spec] = {"seeds": seeds, **{f"{a}_mean": round(statistics.fmean(v), 4) for a, v in arms.items() if v},
                     **{f"{a}_90": _interval(v) for a, v in arms.items() if v},
                     "campaign_minus_static": [round(d, 4) for d in paired],
                     "campaign_minus_static_90": _interval(paired) if paired else None}
    return out


def main() -> None:
    from evotrainer.config.campaign import load_campaign_spec

    p = parser(__doc__, "bench-user-tasks")
    p.add_argument("--specs", nargs="+", default=[str(s) for s in SPECS])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=["static", "campaign"], choices=["static", "campaign"])
    a = p.parse_args()
    home = Path(a.home)
    home.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []
    for spec_file in map(Path, a.specs):
        spec = load_campaign_spec(spec_file)
        for seed in a.seeds:
            for arm in a.arms:
                if any(r["spec"] == spec.name and r["seed"] == seed and r["arm"] == arm for r in rows):
                    continue
                print(f"{spec.name} seed {seed}: {arm}", flush=True)
                res = run_static(spec, seed, home) if arm == "static" else run_campaign(spec_file, seed, home)
                rows.append({"spec": spec.name, "task": spec.task, "task_options": spec.task_options,
                             "policy": spec.policy.model_dump(mode="json"), "seed": seed, "arm": arm, **res})
                save("user_tasks", {"rows": rows, "summary": summarise(rows)})
    save("user_tasks", {"rows": rows, "summary": summarise(rows)})


if __name__ == "__main__":
    main()
