"""Kill -9 soak (issues 18 and 20): kill campaigns and jobs at random moments, resume them, count what was lost.

Three modes, each on its own fresh home:

- ``group``: ``evotrainer campaign start`` in a session of its own, killed with SIGKILL to the whole process group
  (a closed terminal) at random moments, then ``campaign resume`` until it finishes;
- ``owner``: the same, but only the owner process is killed (the OOM killer's choice, or ``kill -9 PID``); within
  5 s no process recorded for the campaign may remain (workers die with their owner);
- ``train``: a plain ``evotrainer train`` killed (process group) at random moments, then ``train --resume``.

Kill moments are drawn with a seeded RNG between ``--min-s`` and ``--max-s`` seconds after each (re)start, so a
run of the bench is repeatable in what it attempts (not in where the processes happen to be). After each campaign
finishes the checks are: one proposal, review and decision row per key; ledger keys unique and each run's ledger
steps equal to the trained steps in its ``metrics.jsonl`` and in MLflow (no duplicated or lost metric step);
every branch once; the budget not exceeded. For ``train``: the finished job has every step once in
``metrics.jsonl``, the rollouts and MLflow.

    .venv/bin/python bench/soak.py --modes group owner train --campaigns 10 --kills 2
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _common import ROOT, parser, save

HARNESS = """
name: soak
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 2}
data: {pool_size: 64, difficulty: [1, 1]}
"""


def _spec(d: Path, seed: int) -> Path:
    (d / "h.yaml").write_text(HARNESS)
    doc = {"name": f"soak{seed}", "task": "arith", "policy": {"size": "nano", "sft_steps": 150, "seed": 0},
           "harness": "h.yaml", "seed": seed, "segment_steps": 3, "budget": {"total_steps": 20, "explore_share": 1.0},
           "backtest": {"branch_steps": 3, "seeds": 2, "max_proposals": 1}, "eval": {"every": 0, "n": 16, "k": 1},
           "stop": {"plateau_rounds": 3}, "autonomy": "auto"}
    p = d / "campaign.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _cli(home: Path, *args: str, session: bool) -> subprocess.Popen:
    env = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "evotrainer.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=session)


def _kill_at(p: subprocess.Popen, after: float, group: bool) -> bool:
    """SIGKILL ``p`` (its group, or only it) ``after`` seconds from now; False when it finished first."""
    deadline = time.monotonic() + after
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return False
        time.sleep(0.05)
    if group:
        os.killpg(p.pid, signal.SIGKILL)
    else:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return True


def _metric_steps(run_dir: Path) -> list[int]:
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    return [r["step"] for r in rows if "loss" in r]


def _check_campaign(home: Path) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from evotrainer.core import procs
    from evotrainer.store import Store

    store = Store.for_home(home)
    (camp,) = store.list_campaigns()
    cid = camp.id
    found: dict[str, Any] = {"status": camp.status, "duplicates": [], "lost": []}
    props = store.list_proposals(cid)
    if len({p.id for p in props}) != len(props):
        found["duplicates"].append("proposal rows")
    decisions = store.list_decisions(cid)
    if len({d.proposal_id for d in decisions}) != len(decisions):
        found["duplicates"].append("decision rows")
    for p in props:
        if p.status not in ("screened", "skipped_budget") and store.get_review(p.id) is None:
            found["lost"].append(f"review of {p.id}")
        if p.status in ("promoted", "refuted", "inconclusive", "blocked", "failed", "screened") and \
                store.get_decision(p.id) is None:
            found["lost"].append(f"decision of {p.id}")
    for bt in store.list_backtests(cid):
        keys = [(b.proposal_id, b.role, b.seed) for b in store.list_branches(bt.id)]
        if len(set(keys)) != len(keys):
            found["duplicates"].append(f"branches of {bt.id}")
    led = store.ledger(cid)
    if len({e.key for e in led}) != len(led):
        found["duplicates"].append("ledger keys")
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    by_run: dict[str, int] = {}
    for e in led:
        by_run[e.run_name] = by_run.get(e.run_name, 0) + e.steps
    for run, spent in by_run.items():
        d = home / "jobs" / run
        steps = _metric_steps(d)
        if len(steps) != len(set(steps)):
            found["duplicates"].append(f"metrics.jsonl steps of {run}")
        if spent != len(set(steps)):
            found["lost" if spent < len(set(steps)) else "duplicates"].append(
                f"ledger {spent} vs {len(set(steps))} trained steps of {run}")
        run_id = json.loads((d / "meta.json").read_text())["run_id"]
        hist = [m.step for m in client.get_metric_history(run_id, "loss")]
        if len(hist) != len(set(hist)):
            found["duplicates"].append(f"MLflow loss steps of {run}")
        if sorted(set(hist)) != sorted(set(steps)):
            found["lost"].append(f"MLflow loss steps of {run}: {len(set(hist))} vs {len(set(steps))}")
    total = camp.spec["budget"]["total_steps"]
    if store.ledger_total(cid) > total:
        found["duplicates"].append(f"budget exceeded: {store.ledger_total(cid)} > {total}")
    found["leaked"] = [r.pid for r in store.list_processes(cid) if procs.alive(r.pid, r.started)]
    return found


def soak_campaigns(mode: str, n: int, kills: int, a: Any) -> dict[str, Any]:
    from evotrainer.core import procs
    from evotrainer.store import Store

    rng = random.Random(f"soak:{mode}")
    out = {"mode": mode, "campaigns": n, "kills": 0, "finished": 0, "duplicates": [], "lost": [], "leaked": [],
           "late_workers": 0}
    root = Path(a.home) / mode
    for i in range(n):
        d = root / f"c{i}"
        d.mkdir(parents=True, exist_ok=True)
        home = d / "home"
        spec = _spec(d, i)
        p = _cli(home, "campaign", "start", str(spec), session=True)
        for _ in range(kills):
            if not _kill_at(p, rng.uniform(a.min_s, a.max_s), group=(mode == "group")):
                break
            out["kills"] += 1
            if mode == "owner":  # workers must die with their owner within 5 s
                store = Store.for_home(home)
                camps = store.list_campaigns()
                refs = store.list_processes(camps[0].id) if camps else []
                deadline = time.monotonic() + 5
                while any(procs.alive(r.pid, r.started) for r in refs) and time.monotonic() < deadline:
                    time.sleep(0.1)
                out["late_workers"] += sum(1 for r in refs if procs.alive(r.pid, r.started))
            camps = Store.for_home(home).list_campaigns()
            if not camps:  # killed before the campaign row existed: start again
                p = _cli(home, "campaign", "start", str(spec), session=True)
                continue
            p = _cli(home, "campaign", "resume", camps[0].id, session=True)
        err = p.communicate(timeout=1800)[1]
        if p.returncode != 0:
            out["lost"].append(f"c{i}: exit {p.returncode}: {err[-500:]}")
            continue
        found = _check_campaign(home)
        out["finished"] += found["status"] == "finished"
        out["duplicates"] += [f"c{i}: {x}" for x in found["duplicates"]]
        out["lost"] += [f"c{i}: {x}" for x in found["lost"]]
        out["leaked"] += [f"c{i}: pid {x}" for x in found["leaked"]]
        print(json.dumps({"campaign": i, **found}), flush=True)
    return out


def soak_train(n: int, kills: int, a: Any) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from evotrainer.evidence.model import read_rollouts

    rng = random.Random("soak:train")
    out = {"mode": "train", "jobs": n, "kills": 0, "finished": 0, "duplicates": [], "lost": []}
    root = Path(a.home) / "train"
    for i in range(n):
        home = root / f"j{i}"
        home.mkdir(parents=True, exist_ok=True)
        (home / "h.yaml").write_text(HARNESS)
        args = ["train", "--task", "arith", "--harness", str(home / "h.yaml"), "--steps", "12", "--policy", "nano",
                "--sft-steps", "150", "--eval-every", "4", "--save-every", "2", "--seed", str(i), "--name", "soaked"]
        p = _cli(home, *args, session=True)
        for _ in range(kills):
            if not _kill_at(p, rng.uniform(a.min_s, a.max_s), group=True):
                break
            out["kills"] += 1
            meta = home / "jobs" / "soaked" / "meta.json"
            if meta.exists() and json.loads(meta.read_text()).get("status") == "finished":
                p = None  # killed after it recorded its end, before it exited: nothing to resume
                break
            p = _cli(home, "train", "--resume", "soaked", session=True) if meta.exists() else _cli(home, *args, session=True)
        if p is not None:
            err = p.communicate(timeout=1800)[1]
            if p.returncode != 0:
                out["lost"].append(f"j{i}: exit {p.returncode}: {err[-500:]}")
                continue
        d = home / "jobs" / "soaked"
        steps = _metric_steps(d)
        roll = sorted(read_rollouts(d)["step"].unique())
        run_id = json.loads((d / "meta.json").read_text())["run_id"]
        hist = [m.step for m in MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}").get_metric_history(run_id, "loss")]
        out["finished"] += 1
        for what, xs in (("metrics.jsonl", steps), ("MLflow", hist)):
            if len(xs) != len(set(xs)):
                out["duplicates"].append(f"j{i}: {what} steps")
            if sorted(set(xs)) != list(range(1, 13)):
                out["lost"].append(f"j{i}: {what} steps {sorted(set(xs))}")
        if roll != list(range(1, 13)):
            out["lost"].append(f"j{i}: rollout steps {roll}")
    return out


def main() -> None:
    p = parser(__doc__, "bench-soak")
    p.add_argument("--modes", nargs="+", default=["group", "owner", "train"], choices=["group", "owner", "train"])
    p.add_argument("--campaigns", type=int, default=10, help="campaigns (or jobs) per mode")
    p.add_argument("--kills", type=int, default=2, help="kills per campaign (or job) at most")
    p.add_argument("--min-s", type=float, default=8.0, help="earliest kill after a (re)start, seconds")
    p.add_argument("--max-s", type=float, default=40.0, help="latest kill after a (re)start, seconds")
    a = p.parse_args()
    results = []
    for mode in a.modes:
        t = time.perf_counter()
        r = soak_train(a.campaigns, a.kills, a) if mode == "train" else soak_campaigns(mode, a.campaigns, a.kills, a)
        r["wall_s"] = round(time.perf_counter() - t, 1)
        results.append(r)
        print(json.dumps(r), flush=True)
    save("soak", {"args": {k: v for k, v in vars(a).items() if k != "home"}, "results": results})


if __name__ == "__main__":
    main()
