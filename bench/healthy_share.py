"""Benchmark (issue 59, development seeds): does the campaign gain from a tuned recipe once a healthy round may
backtest at all?

At the flaw suite's settings (3 seeds, 30-step branches looked at every 10 steps, 400 steps) one first look of one
proposal discards 50 steps, over ``budget.healthy_explore_share`` 0.1 × 400 = 40, so a healthy round never
backtests and the campaign from a tuned recipe is its static run (bench/log/19-flaw-suite.md, 2026-12-04). This bench
runs the campaign with the healthy share at each of ``SHARES`` beside the static tuned recipe, on each task and
seed, from the same warm start. Named before it ran: ``TASKS`` arith and countdown (the suite's two tasks with
a live flaw), the development seeds 0-2, and 0.125 (the smallest share that admits that one look: 50 / 400). It is
in-sample (development seeds): a default chosen from it is measured on the next evaluation round, not here.

Rows go to ``bench/results/healthy_share.json`` (not flaws.json: the development rows there started from warm starts
built on another machine) and carry the warm start's fingerprint and the CPU; a killed run resumes, skipping rows it
has.

    .venv/bin/python bench/healthy_share.py
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from _common import ROOT, machine_kind, parser, save
from flaw_arms import TaskRef, run_campaign, run_static
from flaw_suite import code_commit, load_suite
from flaws import _t90, arm_config, comparable, warm_start

RESULTS = ROOT / "bench" / "results" / "healthy_share.json"
TASKS = ("arith", "countdown")
SEEDS = (0, 1, 2)
SHARES = (0.125,)


def _rows() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task and share: campaign − static on the wide split, paired by seed (mean, 90 % t, the pairs, how many
    ahead), and the changes the campaigns promoted."""
    rows, _ = comparable(rows)  # arms compared only from one warm start: each machine kind's set on its own
    static = {(r["task"], r["seed"]): r["accuracy_wide"] for r in rows if r["arm"] == "static"}
    out: dict[str, Any] = {}
    for share in sorted({r["share"] for r in rows if r["arm"] == "campaign"}):
        camp = [r for r in rows if r["arm"] == "campaign" and r["share"] == share and (r["task"], r["seed"]) in static]
        for label, group in [*((t, [r for r in camp if r["task"] == t]) for t in TASKS), ("pooled", camp)]:
            d = [r["accuracy_wide"] - static[(r["task"], r["seed"])] for r in group]
            if d:
                out[f"{label}/share{share:g}"] = {
                    "mean": round(statistics.fmean(d), 4), "ci90": _t90(d), "pairs": len(d),
                    "ahead": sum(x > 0.0005 for x in d),
                    "promoted": [f"{r['task']} s{r['seed']}: {x['knob']} {x['old']} → {x['new']}"
                                 for r in group for x in r["decisions"] if x["outcome"] == "promote"]}
    return out


def main() -> None:
    a = parser(__doc__, "bench-healthy-share").parse_args()
    from evotrainer.core.home import resolve_home

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    suite, commit, cpu = load_suite(), code_commit(ROOT), machine_kind()
    rows = _rows()
    have = {(r["task"], r["seed"], r["arm"], r.get("share"), r.get("base")) for r in rows}
    for seed in SEEDS:
        for task in TASKS:
            ref, cfg = TaskRef(*suite.tasks[task].ref()), arm_config(suite, task, home)
            harness = suite.harness(task, None, home / "harnesses")
            base, refused = warm_start(ref, cfg, seed, home)
            if refused is not None:
                raise SystemExit(f"{task} seed {seed}: the warm start was refused ({refused})")
            for arm, share in [("static", None), *(("campaign", s) for s in SHARES)]:
                if (task, seed, arm, share, base) in have:
                    continue
                row: dict[str, Any] = {"task": task, "seed": seed, "arm": arm, "share": share, "budget": suite.budget,
                                       "commit": commit, "date": time.strftime("%Y-%m-%d"), "base": base, "cpu": cpu}
                print(f"== {task} / seed {seed}: {arm}" + (f" (healthy share {share:g})" if share else ""), flush=True)
                if arm == "static":
                    row.update(run_static(ref, harness, seed, cfg, home))
                else:
                    row.update(run_campaign(ref, harness, seed, cfg, home,
                                            settings={"budget": {"healthy_explore_share": share}}))
                rows = [*rows, row]
                have.add((task, seed, arm, share, base))
                save("healthy_share", {"tasks": list(TASKS), "seeds": list(SEEDS), "shares": list(SHARES),
                                       "rows": rows, "summary": summary(rows)})
    print(json.dumps(summary(rows), indent=1))


if __name__ == "__main__":
    main()
