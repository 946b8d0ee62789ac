"""Benchmark (issue 5): does a library written by one campaign make the next one faster?

For each seed s: campaign A runs on `arith` from the seed library; campaign B runs on `arith` with seed
s + 100 (its mainline sampling, branch seeds and brain draws differ) from the same warm-started policy
(``policy.seed: s``: otherwise B's target would measure how good another warm start is, not what the
library taught), starting from the library A produced (``library: HOME/campaigns/A/library``). Both start from
the demo's flawed harness (learning rate ten times too small) with the same budget. The target is A's
final mainline held-out accuracy; for each campaign we report the trainer steps (ledger, backtests
included) spent when its mainline first reached the target — B's count is censored at its budget when
it never does. Target: B needs at least 30 % fewer steps than A.

    .venv/bin/python bench/transfer.py [--seeds 0 1 2] [--budget 600] [--branch 30] [--bt-seeds 3]

B stops at A's final accuracy (``stop.target_accuracy``), so its spent steps are its steps to target.
"""

from __future__ import annotations

import statistics
import time

import yaml
from _common import ROOT, parser, save


def steps_to(store, cid: str, target: float) -> tuple[int | None, float | None]:
    """Ledger steps spent when the mainline first reached ``target`` (None if never), and the best accuracy."""
    ledger = sorted(store.ledger(cid), key=lambda e: e.at)
    best = None
    for pv in sorted(store.policy_lineage(cid), key=lambda p: p.created):
        if pv.eval_accuracy is None:
            continue
        best = pv.eval_accuracy if best is None else max(best, pv.eval_accuracy)
        if pv.eval_accuracy >= target - 1e-9:
            return sum(e.steps for e in ledger if e.at <= pv.created), best
    return None, best


def _finished_twin(home, spec_file) -> str | None:
    """The newest finished campaign whose validated spec equals ``spec_file``'s (None if there is none)."""
    from evotrainer.config.campaign import load_campaign_spec
    from evotrainer.store import Store

    want = load_campaign_spec(spec_file).model_dump(mode="json")
    twins = [c for c in Store.for_home(home).list_campaigns() if c.status == "finished"
             and {k: v for k, v in c.spec.items() if k in want} == want]
    return max(twins, key=lambda c: c.id).id if twins else None


def main() -> None:
    p = parser(__doc__, "bench-campaign")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=600)
    p.add_argument("--branch", type=int, default=30, help="backtest branch steps (the demo's)")
    p.add_argument("--bt-seeds", type=int, default=3, help="paired seeds per backtest (the demo's)")
    p.add_argument("--reuse-a", action="store_true",
                   help="reuse a finished campaign A of an identical spec from an earlier invocation (A reads the seed "
                        "library only, so it does not change when B's use of the library does)")
    a = p.parse_args()

    from evotrainer.agent.campaign import start_campaign
    from evotrainer.core.home import resolve_home
    from evotrainer.library.loader import Library
    from evotrainer.store import Store

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in a.seeds:
        base = {"task": "arith", "harness": str(ROOT / "harnesses" / "demo-start.yaml"), "segment_steps": 20,
                "budget": {"total_steps": a.budget},
                "backtest": {"branch_steps": a.branch, "seeds": a.bt_seeds, "max_proposals": 2, "min_effect": 0.01},
                "autonomy": "auto", "eval": {"every": 0, "n": 300, "k": 1}, "stop": {"plateau_rounds": 100}}
        out = {}
        cid_a = None
        other = seed + 100
        base["policy"] = {"size": "tiny", "seed": seed}
        for arm, spec_seed in (("A", seed), ("B", other)):
            spec = {**base, "name": f"transfer-{arm}-s{seed}", "seed": spec_seed}
            if arm == "B":
                spec["library"] = str(home / "campaigns" / cid_a / "library")
                # B stops once its mainline reaches A's final accuracy: the steps after that measure nothing
                spec["stop"] = {**spec["stop"], "target_accuracy": max(out["A"]["final"], 1e-6)}
            f = home / f"{spec['name']}.yaml"
            f.write_text(yaml.safe_dump(spec))
            t = time.perf_counter()
            cid = _finished_twin(home, f) if arm == "A" and a.reuse_a else None
            if cid is None:
                cid = start_campaign(f, home, log=print)
            else:
                print(f"reusing {cid} as campaign A", flush=True)
            store = Store.for_home(home)
            decisions = [(store.get_proposal(d.proposal_id).knob, store.get_proposal(d.proposal_id).new, d.outcome)
                         for d in store.list_decisions(cid)]
            lineage = store.policy_lineage(cid)
            out[arm] = {"campaign": cid, "final": lineage[-1].eval_accuracy, "spent": store.ledger_total(cid),
                        "decisions": decisions, "wall_s": round(time.perf_counter() - t, 1)}
            if arm == "A":
                cid_a = cid
                lib = Library.load(home / "campaigns" / cid / "library")
                out["A"]["library"] = {"skills_with_evidence": sorted(s.slug for s in lib.skills if s.evidence),
                                       "mistakes": sorted(s.slug for s in lib.skills if s.kind == "mistake")}
        target = out["A"]["final"]
        store = Store.for_home(home)
        for arm in ("A", "B"):
            steps, best = steps_to(store, out[arm]["campaign"], target)
            out[arm] |= {"steps_to_target": steps, "best": best}
        b_steps = out["B"]["steps_to_target"]
        censored = b_steps is None
        b_steps = out["B"]["spent"] if censored else b_steps
        saving = 1 - b_steps / out["A"]["steps_to_target"] if out["A"]["steps_to_target"] else None
        rows.append({"seed": seed, "seed_b": other, "target": target, **out, "b_censored": censored,
                     "saving": None if saving is None else round(saving, 3)})
        print(rows[-1], flush=True)
    savings = [r["saving"] for r in rows if r["saving"] is not None]
    save("transfer", {"budget": a.budget, "branch_steps": a.branch, "backtest_seeds": a.bt_seeds, "runs": rows,
                      "summary": {"mean_saving": round(statistics.fmean(savings), 3) if savings else None,
                                  "savings": savings, "target_saving": 0.3}})


if __name__ == "__main__":
    main()
