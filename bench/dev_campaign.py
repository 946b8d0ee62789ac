"""Benchmark (issue 59, development seeds): the campaign of the code checked out, on chosen flaw cells and
development seeds, on this machine, to compare one campaign change with the code before it.

The development rows in ``flaws.json`` started from warm starts built on another kind of machine (their float
kernels differ), so a change tried on this machine is compared with rows of this machine only: ``flaws_earlier.json``
(static, tuned and the campaign up to ``ff769d8``, 2026-12-02/03) or rows this bench wrote at another commit (a
campaign's name is its cell's, so another commit's row needs its own ``--home``; copy ``policies/`` there to keep the
warm starts). Rows go to
``bench/results/dev_campaign.json``, keyed by (flaw, task, seed, commit), with the warm start's fingerprint and the
CPU; the report is per cell: each commit's wide-split accuracy, round 0's findings above info, and what was decided
with the finding each decision cited. Development seeds only: the bench refuses evaluation seeds.

    .venv/bin/python bench/dev_campaign.py --cells pool-small/arith group-2/arith --seeds 0 1 2
"""

from __future__ import annotations

import json
import time
from typing import Any

from _common import ROOT, machine_kind, parser, save
from flaw_arms import TaskRef, run_campaign
from flaw_suite import code_commit, load_suite
from flaws import arm_config, warm_start

RESULTS = ROOT / "bench" / "results" / "dev_campaign.json"


def _rows() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell, seed and warm start: each commit's wide-split accuracy, round 0's findings above info and its
    decisions. Commits are compared only from one warm start (a machine of another kind builds another)."""
    out: dict[str, Any] = {}
    for r in rows:
        start = f"seed {r['seed']}, warm start {(r.get('base') or '?')[:6]} ({r.get('cpu', '?')})"
        out.setdefault(f"{r['flaw']}/{r['task']}", {}).setdefault(start, {})[r["commit"][:7]] = {
            "accuracy_wide": r["accuracy_wide"],
            "round0": sorted({f"{f['symptom']} ({f['severity']})" for f in r.get("round0_findings", [])
                              if f["severity"] != "info"}),
            "decisions": [f"{d['knob']} {d['old']} → {d['new']}: {d['outcome']} ({d['symptom']})"
                          for d in r.get("decisions", [])]}
    return out


def main() -> None:
    p = parser(__doc__, "bench-flaws")
    p.add_argument("--cells", nargs="+", required=True, help="flaw/task cells of flaws.yaml (pool-small/arith)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="development seeds (default: all of them)")
    a = p.parse_args()
    from evotrainer.core.home import resolve_home

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    suite = load_suite()
    seeds = a.seeds if a.seeds is not None else list(suite.dev_seeds)
    if bad := sorted(set(seeds) - set(suite.dev_seeds)):
        raise SystemExit(f"--seeds {bad}: only the development seeds {list(suite.dev_seeds)} (bench/flaws.yaml "
                         "dev_seeds) may choose a change; evaluation seeds run through bench/flaws.py")
    cells = []
    for cell in a.cells:
        flaw, _, task = cell.partition("/")
        f = next((x for x in [*suite.flaws, suite.demo] if x.id == flaw), None)
        if f is None or task not in f.tasks:
            raise SystemExit(f"--cells {cell}: not a flaw/task cell of bench/flaws.yaml"
                             + (f" ({flaw} runs on {', '.join(f.tasks)})" if f is not None else ""))
        cells.append((flaw, task))
    commit, cpu = code_commit(ROOT), machine_kind()
    rows = _rows()
    have = {(r["flaw"], r["task"], r["seed"], r["commit"], r.get("base")) for r in rows}
    for seed in seeds:
        for flaw, task in cells:
            ref, cfg = TaskRef(*suite.tasks[task].ref()), arm_config(suite, task, home)
            base, refused = warm_start(ref, cfg, seed, home)
            if refused is not None:
                raise SystemExit(f"{task} seed {seed}: the warm start was refused ({refused})")
            if (flaw, task, seed, commit, base) in have:
                continue
            row: dict[str, Any] = {"flaw": flaw, "task": task, "seed": seed, "arm": "campaign", "budget": suite.budget,
                                   "commit": commit, "date": time.strftime("%Y-%m-%d"), "base": base, "cpu": cpu}
            print(f"== {flaw} / {task} / seed {seed}: campaign at {commit[:7]}", flush=True)
            row.update(run_campaign(ref, suite.harness(task, flaw, home / "harnesses"), seed, cfg, home))
            rows = [*rows, row]
            save("dev_campaign", {"rows": rows, "summary": summary(rows)})
    print(json.dumps(summary(rows), indent=1))


if __name__ == "__main__":
    main()
