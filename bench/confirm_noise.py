"""Benchmark (issue 14): how much of a campaign-vs-static gap is the choice of held-out problems?

``bench/campaign.py`` scores each arm's final policy once, on a confirmation split of ``--eval-n`` problems
(500), and the per-seed gaps it reports are a few points. This script asks how much of such a gap a different
sample of problems would move. It re-scores the final policies of a ``bench/campaign.py`` results file, campaign
and static of the same seed, greedily on:

- the decision and selection splits the campaign chose on (the campaign's number there is biased upwards);
- the confirmation split of ``--eval-n`` problems that ``bench/campaign.py`` reported;
- a **wide confirmation** of ``--wide`` fresh problems drawn with the confirmation seed, none of them in the
  decision or selection split, so no choice of either arm saw them.

For each split it prints campaign − static with the paired sampling s.e. over problems (the s.d. of the
per-problem difference of outcomes / √n), which is the part of a seed's gap that only the problem sample makes.

    .venv/bin/python bench/confirm_noise.py --results tuned_b5 --home runs/bench-ovh --out confirm_noise_tuned
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import yaml
from _common import ROOT, parser, save


def _finals(row: dict[str, Any], home: Path, stem: str) -> tuple[str, int]:
    """(checkpoint, completion budget) of a results row's final policy."""
    from campaign import final_policy

    from evotrainer.config.harness import load_harness
    from evotrainer.jobs.lineage import complete_checkpoints

    if row["arm"] == "campaign":
        return final_policy(row, home)
    run = home / "jobs" / row.get("job", f"static-{stem}-s{row['seed']}-b{row['budget']}")  # rows before "job"
    budget = load_harness(run / "harness.yaml").grpo.max_completion_length
    return str(complete_checkpoints(run)[max(complete_checkpoints(run))]), budget


def main() -> None:
    p = parser(__doc__, "bench-ovh")
    p.add_argument("--results", required=True, help="a bench/campaign.py results file: bench/results/RESULTS.json")
    p.add_argument("--eval-n", type=int, default=500, help="the split size bench/campaign.py used")
    p.add_argument("--wide", type=int, default=3000, help="problems in the wide confirmation")
    p.add_argument("--out", default="confirm_noise")
    a = p.parse_args()

    from evotrainer.agent.confirm import paired_se
    from evotrainer.config.eval import EvalSpec
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import split_problems
    from evotrainer.training.policy import policy_accuracy

    home = Path(a.home)
    rows = json.loads((ROOT / "bench" / "results" / f"{a.results}.json").read_text())["runs"]
    out: list[dict[str, Any]] = []
    for key in sorted({(r["task"], r["start"], r["budget"], r["seed"]) for r in rows}):
        pair = {r["arm"]: r for r in rows if (r["task"], r["start"], r["budget"], r["seed"]) == key}
        if not {"campaign", "static"} <= set(pair):
            continue
        task_name, start, budget, seed = key
        task = get_task(task_name)
        stem = (Path(yaml.safe_load((ROOT / "campaigns" / "arith-demo.yaml").read_text())["harness"]).stem
                if start == "demo" else f"bench-{task_name}-{start}-p32")
        ev = EvalSpec(n=a.eval_n, k=1)
        splits = {s: split_problems(task, ev, s) for s in ("decision", "selection", "confirmation")}
        splits["wide_confirmation"] = split_problems(task, ev, "confirmation", n=a.wide)
        res: dict[str, Any] = {"task": task_name, "start": start, "budget": budget, "seed": seed,
                               "reported": {arm: pair[arm]["accuracy"] for arm in ("campaign", "static")}}
        outcomes: dict[str, dict[str, list[bool]]] = {}
        for arm in ("campaign", "static"):
            ckpt, max_new = _finals(pair[arm], home, stem)
            cache: dict[str, Any] = {}
            outcomes[arm] = {}
            for name, probs in splits.items():
                got: list[bool] = []
                policy_accuracy(ckpt, task, probs, ev, max_new, cache=cache, outcomes=got)
                outcomes[arm][name] = got
        for name in splits:
            c, s = outcomes["campaign"][name], outcomes["static"][name]
            res[name] = {"n": len(c), "campaign": round(statistics.fmean(c), 4), "static": round(statistics.fmean(s), 4),
                         "diff": round(statistics.fmean(c) - statistics.fmean(s), 4), "se": paired_se(s, c)}
        out.append(res)
        print(json.dumps(res), flush=True)
    save(a.out, {"results": a.results, "eval_n": a.eval_n, "wide": a.wide, "rows": out})


if __name__ == "__main__":
    main()
