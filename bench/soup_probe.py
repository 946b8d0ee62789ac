"""Benchmark (issue 14): would averaging a backtest arm's seeds beat keeping the one the selection split picks?

Offline, on the branches finished campaigns left on disk: for every (round, arm) whose seeds stopped at one step,
score each seed and the plain average of their weights (``evotrainer.jobs.merge.average_checkpoints``) on the
selection split (what the campaign chooses on) and on the confirmation split (what it reports). Prints one row per
arm and the mean gains on the confirmation split of (a) always the average and (b) the average unless it scores
below every seed on the selection split (the rule ``backtest.merge_seeds`` uses), each against the seed the
selection split picks (the rule before it), over distinct arms (``--resummarize FILE`` recomputes a saved file's
summary without scoring anything).

    .venv/bin/python bench/soup_probe.py --home runs/bench-ovh --campaigns arith-demo-20261125192645 ...
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from _common import parser, save


def summarize(rows: list[dict]) -> dict:
    """Mean gains over *distinct* arms: a campaign re-run with the same seed and code trains the same branches, so
    its arms would count once per re-run (three identical seed-0 demo campaigns did in the first pass)."""
    seen, distinct = set(), []
    for r in rows:
        fp = (r["round"], r["arm"], r["step"], repr(r["seeds"]), repr(r["average"]))
        if fp not in seen:
            seen.add(fp)
            distinct.append(r)
    out: dict = {"arms": len(rows), "distinct_arms": len(distinct)}
    for key in ("gain_always_average", "gain_merge_rule"):
        xs = [r[key] for r in distinct]
        if len(xs) > 1:
            out[key] = {"mean": round(statistics.fmean(xs), 4), "se": round(statistics.stdev(xs) / len(xs) ** 0.5, 4),
                        "better": sum(x > 0 for x in xs), "worse": sum(x < 0 for x in xs), "arms": len(xs)}
    return out


def main() -> None:
    p = parser(__doc__, "bench-ovh")
    p.add_argument("--campaigns", nargs="+", default=[], help="campaign ids whose branches are under HOME/jobs")
    p.add_argument("--task", default="arith")
    p.add_argument("--budget", type=int, default=8, help="completion budget of the evaluations (the harness's)")
    p.add_argument("--n", type=int, default=500, help="problems per split")
    p.add_argument("--out", default="soup_probe")
    p.add_argument("--resummarize", type=Path, default=None, help="a saved result file: rewrite only its summary")
    a = p.parse_args()
    if a.resummarize is not None:
        import json

        doc = json.loads(a.resummarize.read_text())
        doc["summary"] = summarize(doc["rows"])
        print(doc["summary"])
        save(a.out, doc)
        return
    if not a.campaigns:
        p.error("give --campaigns (or --resummarize FILE)")

    from evotrainer.config.eval import EvalSpec
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.merge import average_checkpoints
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import split_problems
    from evotrainer.training.policy import policy_accuracy

    task, ev = get_task(a.task), EvalSpec(n=a.n, k=1)
    splits = {s: split_problems(task, ev, s) for s in ("selection", "confirmation")}
    jobs = Path(a.home) / "jobs"

    def score(path: Path) -> dict[str, float]:
        return {s: policy_accuracy(path, task, probs, ev, a.budget) for s, probs in splits.items()}

    rows = []
    for cid in a.campaigns:
        arms: dict[tuple[str, str], list[Path]] = {}
        for d in sorted(jobs.glob(f"{cid}__r*__*__s*")):
            _, rnd, arm, _ = d.name.rsplit("__", 3)
            ck = complete_checkpoints(d)
            if ck:
                arms.setdefault((rnd, arm), []).append(ck[max(ck)])
        for (rnd, arm), cks in sorted(arms.items()):
            if len(cks) < 2 or len({c.name for c in cks}) != 1:
                continue
            seeds = [score(c) for c in cks]
            with tempfile.TemporaryDirectory() as tmp:
                avg = Path(tmp) / cks[0].name
                average_checkpoints(cks, avg)
                soup = score(avg)
            picked = max(range(len(seeds)), key=lambda i: (seeds[i]["selection"], -i))
            keep_avg = soup["selection"] >= min(s["selection"] for s in seeds)
            row = {"campaign": cid, "round": rnd, "arm": arm, "step": cks[0].name, "seeds": seeds, "average": soup,
                   "picked_seed_confirmation": seeds[picked]["confirmation"],
                   "gain_always_average": round(soup["confirmation"] - seeds[picked]["confirmation"], 4),
                   "gain_merge_rule": round((soup["confirmation"] if keep_avg else seeds[picked]["confirmation"])
                                            - seeds[picked]["confirmation"], 4)}
            print(row, flush=True)
            rows.append(row)
    summary = summarize(rows)
    print(summary)
    save(a.out, {"campaigns": a.campaigns, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
